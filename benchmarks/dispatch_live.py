"""Dispatch live: what a popcorn call costs against every backend called directly, per call shape.

For every op the report has rows for (or those named with --ops), a few production shapes (the
smallest, middle and largest points of each of the plan's production curves, base variant, that
fit the device), in bf16 (and fp32 where the report has fp32 rows), forward-only and with
gradients (where the plan measures gradients): times the popcorn call (dispatching from the
published report plus the user cache) and each backend eligible for the call
(``op[impl].rejects(args, grad)`` is None: installed, gates, predicate, gradient support) called
directly, with the harness timer; prints which backend dispatch chose, the fastest backend, and
the popcorn call's time over the fastest's (1.00: it picked the best). A backend the report says
fails this exact case (its fail or crash row on this device) is timed but never counted fastest
(``!`` after its time). Device time is the harness's (CUDA graphs for small kernels: dispatch's
host cost is not in it; ``host us`` is the host time of one popcorn call, dispatch included).
The last line: the share of rows whose popcorn call is within 5 % of the fastest (target: 90 %).

Cells: a time in ms; ``-`` not eligible (why: under the op's table); ``oom`` / ``err`` the direct
call failed. A row whose inputs do not fit says so and the run goes on.

    python benchmarks/dispatch_live.py                                  # on the GPU, every op
    python benchmarks/dispatch_live.py --ops rms_norm softmax --points 2
    python benchmarks/dispatch_live.py --device cpu --quick --ops rms_norm softmax   # CPU smoke (~1 min)
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch

from popcorn.bench.calls import prepare
from popcorn.bench.compare import free_memory, is_oom
from popcorn.bench.plan import BATCH, case_plan, primary_axis, repair
from popcorn.bench.tasks import device_bytes
from popcorn.bench.timing import measure
from popcorn.core import Case
from popcorn.core.devices import device_name
from popcorn.core.inputs import make_inputs, shape_of
from popcorn.dispatch import evidence
from popcorn.dispatch.decide import decide
from popcorn.kernels import OPS
from popcorn.schema import FAILED, REFERENCE

WITHIN = 1.05  # a popcorn call this close to the fastest backend counts as a good pick
TARGET = 0.90  # the share of rows that should be good picks
CPU_MAX_ELEMENTS = 2**20  # the default --max-elements on the CPU: shapes scaled down to about a million elements


def elements(op, case: Case) -> int:
    return sum(math.prod(shape_of(s, case)) for n, s in op.specs.items() if not s.optional or n in case.present)


def scaled(op, case: Case, cap: int | None) -> Case:
    """``case`` with its largest extent halved (batch first) until its inputs hold at most ``cap``
    elements, then repaired onto the op's constraints; ``case`` itself when it fits already."""
    if cap is None or elements(op, case) <= cap:
        return case
    dims, batch = dict(case.dims), list(case.batch)
    while elements(op, Case(dims, tuple(batch), case.dtype, case.args, case.present)) > cap:
        if batch and max(batch) > 1:
            i = batch.index(max(batch))
            batch[i] //= 2
        elif dims and max(dims.values()) > 1:
            k = max(dims, key=dims.get)
            dims[k] //= 2
        else:
            break
    return repair(op, Case(dims, tuple(batch), case.dtype, case.args, case.present))


def picks(ids: tuple, points: int) -> list:
    """``points`` case ids spread evenly over a curve, its smallest and largest among them (one: the middle)."""
    if points <= 1 or len(ids) == 1:
        return [ids[len(ids) // 2]]
    return list(dict.fromkeys(ids[round(i * (len(ids) - 1) / (points - 1))] for i in range(points)))


def shapes(op, dtypes, budget: int, points: int, quick: bool = False, per_dtype: int | None = None) -> list:
    """(case, grad modes) of the op's production curves (base variant) in ``dtypes``, deduplicated;
    ``per_dtype``: at most that many curves of each dtype; ``quick``: one case, the middle of the
    primary axis's first curve."""
    plan = case_plan(op, budget)
    planned = {p.case.case_id: p for p in plan.cases}
    curves = [c for c in plan.curves if c.profile == "production" and c.variant == "base" and c.dtype in dtypes]
    # the primary axis's curve first, then the token rows' (``...``), then the other dims'
    curves.sort(key=lambda c: (dtypes.index(c.dtype), c.axis != primary_axis(op), c.axis != BATCH))
    if quick:
        curves, points = curves[:1], 1
    elif per_dtype is not None:
        curves = [c for d in dtypes for c in [c for c in curves if c.dtype == d][:per_dtype]]
    out = {}
    for c in curves:
        for cid in picks(c.case_ids, points):
            p = planned[cid]
            out.setdefault(cid, (p.case, (False, True) if p.grad else (False,)))
    return list(out.values())


def failing(rows: list[dict], case_id: str, grad: bool, here: str) -> set[str]:
    """Backends the report says fail or crash this case, each read as dispatch reads it: its rows of
    this device (else of a sibling of its type), of the call's own gradient mode first."""
    out = set()
    for impl in {r["impl"] for r in rows if r["case_id"] == case_id}:
        mine = [r for r in rows if r["case_id"] == case_id and r["impl"] == impl]
        mine = [r for r in mine if r["device"] == here] or \
            [r for r in mine if r["device"].startswith("cpu") == here.startswith("cpu")]
        mine = [r for r in mine if r["grad"] == grad] or mine
        if any(r["status"] in FAILED for r in mine):
            out.add(impl)
    return out


def label(case: Case) -> str:
    extents = [*case.batch, *(v for _, v in sorted(case.dims.items()))]
    return "x".join(map(str, extents)) if len(case.dims) == 1 else \
        ",".join([f"{k}={v}" for k, v in sorted(case.dims.items())] + ([f"batch={'x'.join(map(str, case.batch))}"]
                                                                         if case.batch else []))


def run_row(op, case: Case, grad: bool, device: torch.device, failed: set[str], backends: list[str]) -> dict:
    """One call shape: the decision, each backend's time (or why none) and the popcorn call's."""
    key = "step_ms" if grad else "fwd_ms"
    args = prepare(make_inputs(op, case, device=device), None, grad)  # as measure calls them
    chosen = decide(op, args, grad).impl  # what the popcorn call below memoizes
    cells, why = {}, {}
    for name in backends:
        impl = op[name]
        reason = impl.rejects(args, grad)
        if reason:
            cells[name], why[name] = "-", reason
            continue
        try:
            cells[name] = measure(lambda _impl=impl, **k: _impl.invoke(k), args, grad, device)[0][key]
        except Exception as e:  # noqa: BLE001 - a backend that breaks is reported, the row goes on
            cells[name], why[name] = ("oom" if is_oom(e) else "err"), f"{type(e).__name__}: {e}"
            free_memory()
    timing, _ = measure(lambda **k: op(**k), args, grad, device)
    ranked = {n: t for n, t in cells.items() if isinstance(t, float) and n not in failed}
    fastest = min(ranked, key=ranked.get) if ranked else None
    return {"chosen": chosen, "ms": timing[key], "cells": cells, "why": why, "fastest": fastest,
            "ratio": timing[key] / ranked[fastest] if fastest else None,
            "host_us": timing["step_host_us" if grad else "host_us"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--ops", nargs="+", help="only these ops (default: every op the report has rows for)")
    p.add_argument("--quick", action="store_true", help="one shape per op (smoke runs)")
    p.add_argument("--points", type=int, default=3, help="shapes per curve: smallest, ..., largest (default 3)")
    p.add_argument("--curves", type=int, help="at most N curves per dtype: the primary axis's, the token rows', "
                   "then the other dims' (default: all)")
    p.add_argument("--backends", nargs="+", help="time only these backends directly (the reference always)")
    p.add_argument("--dtypes", nargs="+", help="default: bfloat16, and float32 where the report has fp32 rows")
    p.add_argument("--max-elements", type=int, help="scale shapes down to about this many input elements "
                   f"(default on the CPU: {CPU_MAX_ELEMENTS}; none on CUDA)")
    args = p.parse_args(argv)
    unknown = set(args.ops or ()) - set(OPS)
    if unknown:
        print(f"unknown op(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    here = device_name(device)
    cap = args.max_elements or (CPU_MAX_ELEMENTS if device.type == "cpu" else None)
    names = args.ops or [n for n in sorted(OPS) if evidence.rows_for(OPS[n])]
    print(f"device: {here}, torch {torch.__version__}; evidence: {evidence.table().source} plus the user cache"
          + (f"; shapes scaled to <= {cap} input elements" if cap else ""))
    good = total = 0
    start = time.perf_counter()
    for name in names:
        op = OPS[name]
        rows = evidence.rows_for(op)
        dtypes = args.dtypes or ["bfloat16"] + (["float32"] if any(r["dtype"] == "float32" for r in rows) else [])
        cols = [b for b in op.implementations if b == REFERENCE or not args.backends or b in args.backends
                or b.split(":")[0] in args.backends]
        print(f"\n{name}" + ("" if rows else " (no current report rows: dispatch runs the reference)"))
        print("| op | shape | dtype | mode | chosen | chosen ms | " + " | ".join(f"{b} ms" for b in cols)
              + " | fastest | chosen / fastest | popcorn host us |")
        print("|" + "---|" * (9 + len(cols)))
        notes: dict[str, None] = {}  # why a backend has no time, each reason once
        for planned, modes in shapes(op, dtypes, device_bytes(device), args.points, args.quick, args.curves):
            case = scaled(op, planned, cap)
            for grad in modes:
                head = f"| {name} | {label(case)} | {case.dtype} | {'step' if grad else 'forward'} |"
                failed = failing(rows, case.case_id, grad, here)
                try:
                    r = run_row(op, case, grad, device, failed, cols)
                except Exception as e:  # noqa: BLE001 - inputs that do not fit, or the popcorn call broke
                    print(f"{head} {'out of memory' if is_oom(e) else 'error'}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:160] if str(e) else ''} |")
                    free_memory()
                    continue
                notes.update(dict.fromkeys(f"{b}: {why.splitlines()[0][:200]}" for b, why in r["why"].items()))
                cells = [f"{t:.4f}{'!' if b in failed else ''}" if isinstance(t, float) else t
                         for b, t in r["cells"].items()]
                ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
                print(f"{head} {r['chosen']} | {r['ms']:.4f} | " + " | ".join(cells)
                      + f" | {r['fastest'] or '-'} | {ratio} | {r['host_us']:.1f} |")
                if r["ratio"]:
                    total += 1
                    good += r["ratio"] <= WITHIN
        for note in notes:
            print(f"  {note}")
    share = good / total if total else 0.0
    print(f"\nchosen within {WITHIN - 1:.0%} of the fastest: {good}/{total} rows ({share:.0%}; target "
          f">= {TARGET:.0%}){'' if share >= TARGET else ' BELOW TARGET'}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
