"""Findings: what the report says, per op and backend, on one device, as markdown tables.

a. Per op and backend, in one dtype (bf16 by default): rows passing / rows measured; the median
   forward speedup over the reference (``ref_fwd_ms / fwd_ms``, every timed pass row) and the step
   speedup (``ref_step_ms / step_ms``, gradient rows), each with its 20-80 % spread; and wins: in
   how many contested cases (case, gradient mode: at least two passing backends timed) the backend
   is the fastest (forward time, step time for gradient rows), with the smallest and largest
   case it wins (by input bytes).
b. Every fail, crash, error, timeout and oom row, all dtypes, grouped by op, backend, status and
   reason (numbers aside): how many, one case and its full reason.
c. Ops where no library (a backend with a package of its own: not torch, compile or sdpa) has a
   passing row, with what each registered library has.

Only current rows count (measured against today's code, as in ``popcorn bench view``); one row per
(op, backend, case, gradient mode) on the device, the merge rule picking among torch versions.

    python benchmarks/findings.py                          # the published report (as `popcorn bench view`)
    python benchmarks/findings.py --shards benchmarks/results/h200_curves benchmarks/results/h200_train_bench
    python benchmarks/findings.py --store URI --dtype float32 --ops rms_norm softmax
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict

from popcorn.bench import store
from popcorn.bench.plan import estimated_bytes
from popcorn.bench.record import Record
from popcorn.bench.timing import quantiles
from popcorn.bench.view import columns, current, published
from popcorn.core import Case
from popcorn.schema import CRASH, ERROR, FAIL, OOM, PASS, REFERENCE, TIMEOUT, rank

BAD = (FAIL, CRASH, ERROR, TIMEOUT, OOM)


def dtype_of(r: Record) -> str:
    return json.loads(r.config)["dtype"]


def shape(r: Record, op) -> str:
    """The case in short: dims, batch, scalars off their defaults, optionals passed (a table is of one dtype)."""
    c = json.loads(r.config)
    parts = [f"{k}={v}" for k, v in sorted(c["dims"].items())]
    parts += [f"batch={'x'.join(map(str, c['batch']))}"] if c["batch"] else []
    parts += [f"{k}={v}" for k, v in sorted(c["args"].items()) if v != op.scalars.get(k)]
    return ",".join(parts + [f"+{p}" for p in c["present"]])


def latest(rows: list[Record]) -> list[Record]:
    """One row per (op, backend, case, gradient mode): the merge rule's pick among torch/backend versions."""
    best: dict = {}
    for r in rows:
        k = (r.op, r.impl, r.case_id, r.grad)
        if k not in best or rank(r) >= rank(best[k]):
            best[k] = r
    return list(best.values())


def size(r: Record, op) -> int:
    return estimated_bytes(op, Case.from_config(json.loads(r.config)))


def speedups(rows: list[Record], col: str) -> list[float]:
    """``ref_<col> / <col>`` over the pass rows that have both (``step_ms``: gradient rows alone have it)."""
    return [getattr(r, f"ref_{col}") / getattr(r, col) for r in rows
            if r.status == PASS and getattr(r, col) and getattr(r, f"ref_{col}")]


def spread(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    mid, lo, hi = quantiles(ratios)
    return f"{mid:.2f}x [{lo:.2f}-{hi:.2f}]"


def timed(r: Record) -> float | None:
    """What a case ranks by: the step with gradients, else the forward."""
    return (r.step_ms if r.grad else r.fwd_ms) if r.status == PASS else None


def summary(rows: list[Record], ops: dict, dtype: str) -> list[list[str]]:
    """Table a: one line per (op, backend) with rows in ``dtype``."""
    by_pair, by_case = defaultdict(list), defaultdict(dict)
    for r in rows:
        if dtype_of(r) == dtype:
            by_pair[r.op, r.impl].append(r)
            if timed(r):
                by_case[r.op, r.case_id, r.grad][r.impl] = r
    wins, contested = defaultdict(list), Counter()
    for (name, _, _), impls in by_case.items():
        if len(impls) > 1:
            best = min(impls.values(), key=timed)
            wins[name, best.impl].append(best)
            contested[name] += 1
    out = []
    for name in sorted({op for op, _ in by_pair}):
        for impl in [c for c in columns({name: ops[name]}) if (name, c) in by_pair]:
            rs, op = by_pair[name, impl], ops[name]
            won = sorted(wins[name, impl], key=lambda r: (size(r, op), r.case))
            where = " .. ".join(dict.fromkeys(shape(r, op) for r in won[:1] + won[-1:]))
            ref = impl == REFERENCE
            out.append([name, impl, f"{sum(r.status == PASS for r in rs)}/{len(rs)}",
                        "-" if ref else spread(speedups(rs, "fwd_ms")), "-" if ref else spread(speedups(rs, "step_ms")),
                        f"{len(won)}/{contested[name]}", where])
    return out


def prefix(reason: str | None) -> str:
    """What groups failures: the reason's first 60 characters, numbers aside."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", reason or "")[:60]


def failures(rows: list[Record]) -> list[list[str]]:
    """Table b: failing, crashing, erroring, timed-out and out-of-memory rows, grouped."""
    groups = defaultdict(list)
    for r in rows:
        if r.status in BAD:
            groups[r.op, r.impl, r.status, prefix(r.reason)].append(r)
    out = []
    for (op, impl, status, _), rs in sorted(groups.items()):
        first = min(rs, key=lambda r: r.case)
        out.append([op, impl, status, str(len(rs)), first.case, first.reason or ""])
    return out


def uncovered(rows: list[Record], ops: dict) -> list[list[str]]:
    """Table c: ops where no library has a passing row, with what each registered library has."""
    statuses = defaultdict(Counter)
    for r in rows:
        statuses[r.op, r.impl][r.status] += 1
    out = []
    for name, op in sorted(ops.items()):
        libraries = [n for n, i in op.implementations.items() if i.backend.package is not None]
        if any(statuses[name, n][PASS] for n in libraries):
            continue
        had = [f"{n} ({', '.join(f'{c} {s}' for s, c in sorted(statuses[name, n].items())) or 'no rows'})"
               for n in libraries]
        out.append([name, "; ".join(had) or "no library adapter"])
    return out


def table(head: list[str], rows: list[list[str]]) -> str:
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


def load(args, ops: dict) -> list[Record]:
    """The records of the chosen sources: shards and a store replace the published report; --user folds in."""
    rows: list[Record] = []
    if args.store:
        from popcorn.bench.delta import ReportStore

        rows = ReportStore(args.store).read()
    if args.shards:
        rows = store.merge(rows, [r for f in store.jsonl_files(args.shards) for r in store.read_file(f)])
    if not (args.store or args.shards):
        rows = published()
    if args.user:
        rows = store.merge(rows, [r for op in ops for r in store.read(op)])
    return rows


def report(records: list[Record], ops: dict, dtype: str = "bfloat16", device: str | None = None) -> str:
    """The three tables over the current rows of ``device`` (default: the device with most current rows)."""
    rows = current(records, ops)
    devices = Counter(r.device for r in rows)
    if not devices:
        return f"no current rows among {len(records)} (measured against older code, or of unknown ops)"
    device = device or devices.most_common(1)[0][0]
    rows = latest(r for r in rows if r.device == device)
    others = ", ".join(f"{d} {n}" for d, n in devices.most_common() if d != device)
    parts = [f"device: {device}: {len(rows)} current rows ({len(records)} read)"
             + (f"; other devices: {others}" if others else ""),
             f"\n## a. Backends per op, {dtype}\n",
             table(["op", "backend", "pass/rows", "fwd speedup [q20-q80]", "step speedup [q20-q80]",
                    "wins/contested", "smallest .. largest won"], summary(rows, ops, dtype)),
             "\nspeedup: the reference's time over the backend's on the same case (pass rows); wins: contested "
             "cases (case, gradient mode; >= 2 passing backends timed) where the backend is fastest (step time "
             "for gradient rows), its smallest and largest by input bytes",
             "\n## b. Failures (fail, crash, error, timeout, oom), all dtypes\n"]
    parts.append(table(["op", "backend", "status", "rows", "example case", "reason"], failures(rows)))
    parts += ["\n## c. Ops where no library has a passing row, all dtypes\n",
              table(["op", "libraries (current rows by status)"], uncovered(rows, ops))]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    from popcorn.kernels import OPS

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", metavar="URI", help="read this Delta report store")
    p.add_argument("--shards", nargs="+", metavar="DIR|FILE", help="read these JSONL shards (or Parquet snapshots)")
    p.add_argument("--user", action="store_true", help="fold in this machine's user cache")
    p.add_argument("--dtype", default="bfloat16", help="table a's dtype (default bfloat16)")
    p.add_argument("--device", help="the device name (default: the one with most current rows)")
    p.add_argument("--ops", nargs="+", help="only these ops")
    args = p.parse_args(argv)
    unknown = set(args.ops or ()) - set(OPS)
    if unknown:
        print(f"unknown op(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    ops = {n: OPS[n] for n in args.ops} if args.ops else OPS
    print(report(load(args, ops), ops, args.dtype, args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
