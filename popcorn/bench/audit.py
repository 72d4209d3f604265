"""``popcorn bench check``: are the records evidence for today's code?

Audits (op, implementation) pairs against the registry. The reference (``torch``) is what every
pair is measured against and is not audited itself. Without ``release`` the pairs are those that
have rows; with it, every registered implementation of every op that has rows.

Always blocking:

* ``missing``: the pair has no rows (only reachable with ``release``) though a case measured for the op
  (any implementation's rows) is one it can run; where the fill's static gates exclude it from every
  measured case, the pair gets ``gated`` (a note; a forward-only implementation is never gated: the
  fill measures its forward on gradient cases);
* ``stale``: rows, but none whose ref_hash and impl_hash match today's code.

Release gates (reported always where computed, blocking only with ``release``):

* ``no_pass``: current rows, none passes (computed always);
* ``no_timing``: no current pass row carries a forward time;
* ``curves``: a named curve of the op's case plan has fewer than 2 timed current pass points; a
  curve whose every point the fill gates for the implementation (:func:`popcorn.bench.plan.gated`,
  its static gates), or whose every attempted point is a ``skip``, is
  gated rather than short;
* ``unclean``: current rows with status fail/crash/error or with a bench_error.

A note, never blocking: ``states``: timed current pass rows whose canary (``canary_us``: a fixed tiny call timed
in the same hold as their samples) is more than STATES_APART from their case's reference row's: their speedup
divides two times taken in different device states (an H100 times latency-bound calls in two, 12% apart).

A missing or stale pair gets no further findings: everything else follows from re-measuring it.
Rows of ops or implementations that are no longer registered are reported (``unregistered``)
but never block.

The curves are those of the plan for the memory of the rows' device (:func:`memory_of`; of several
devices, the largest). Rows all on devices of unknown memory get ``unsized`` (a note) instead.
:func:`check` returns the audit as data (the explorer shows the same); :func:`format_check` prints it.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field

from popcorn.schema import (ERROR, FAILED, MIN_CURVE_POINTS, PASS, REFERENCE, SKIP, STATES_APART, is_current,
                            is_current_for, why_stale)

from .plan import gated
from .record import Record

H200_BYTES = 141 * 10**9
# Memory by device name (the records' ``device``), first match wins: nominal decimal GB, as the H200's 141
# plans were first built for, at or below what devices report, so no audited curve needs a case they cannot hold.
DEVICE_MEMORY = (
    (r"\bH200\b", H200_BYTES),
    (r"\bH100 NVL\b", 94 * 10**9),
    (r"\bH100\b", 80 * 10**9),
    (r"\bA100\b.*\b80GB\b", 80 * 10**9),
    (r"\bA100\b", 40 * 10**9),
)

MISSING, STALE, NO_PASS, NO_TIMING, CURVES, UNCLEAN, UNREGISTERED, UNSIZED, GATED, STATES = (
    "missing", "stale", "no_pass", "no_timing", "curves", "unclean", "unregistered", "unsized", "gated", "states")
ALWAYS = frozenset({MISSING, STALE})
RELEASE_GATES = frozenset({NO_PASS, NO_TIMING, CURVES, UNCLEAN})
UNCLEAN_STATUSES = FAILED | {ERROR}


@dataclass(frozen=True)
class Finding:
    op: str
    impl: str
    kind: str
    detail: str
    blocking: bool


@dataclass
class Tally:
    """The verdict's counters, over audited pairs (and their required curves)."""

    pairs: int = 0
    current: int = 0  # pairs with at least one current row
    passing: int = 0  # pairs with a current pass row
    timed: int = 0  # pairs with a timed current pass row
    curves: int = 0  # required (not gated) curves, release only
    curves_ok: int = 0
    curves_gated: int = 0


@dataclass
class Audit:
    """What ``bench check`` found, as data: the findings, the counters and the pairs that block."""

    release: bool
    records: int  # rows audited
    findings: list[Finding] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)

    @property
    def failing(self) -> dict[tuple[str, str], list[str]]:
        """(op, impl) -> the kinds that block it, sorted; in finding order."""
        out: dict[tuple[str, str], set[str]] = {}
        for f in self.findings:
            if f.blocking and f.kind != UNREGISTERED:
                out.setdefault((f.op, f.impl), set()).add(f.kind)
        return {pair: sorted(kinds) for pair, kinds in out.items()}

    @property
    def passed(self) -> bool:
        return self.records > 0 and not self.failing


def memory_of(device: str) -> int | None:
    """Bytes the case plan of a fill on ``device`` (a record's device name) assumed: the CPU fill's
    budget for ``cpu:*``, the DEVICE_MEMORY entry of a known GPU, else None."""
    if device.startswith("cpu:"):
        from .fill import CPU_BUDGET_BYTES

        return CPU_BUDGET_BYTES
    return next((size for pattern, size in DEVICE_MEMORY if re.search(pattern, device)), None)


@functools.lru_cache(maxsize=64)
def _plan(op, device_bytes: int):
    from .plan import case_plan

    return case_plan(op, device_bytes)


def plan_for(op, device_bytes: int = H200_BYTES):
    """The op's case plan for a device of ``device_bytes`` (default an H200's), computed once per process."""
    return _plan(op, device_bytes)


def _pairs(records: list[Record], ops: dict, release: bool) -> tuple[list[tuple[str, str]], list[Finding]]:
    seen: dict[str, set[str]] = {}
    for r in records:
        seen.setdefault(r.op, set()).add(r.impl)
    pairs, notes = [], []
    for op_name in sorted(seen):
        op = ops.get(op_name)
        if op is None:
            notes.append(Finding(op_name, "*", UNREGISTERED, "rows of an op that is not registered", False))
            continue
        impls = set(seen[op_name]) | (set(op.implementations) if release else set())
        for impl in sorted(impls - {REFERENCE}):
            if impl in op.implementations:
                pairs.append((op_name, impl))
            else:
                notes.append(Finding(op_name, impl, UNREGISTERED,
                                     "rows of an implementation that is not registered", False))
    return pairs, notes


def _planned(op, device_bytes: int) -> dict:
    """(case_id, grad) -> Planned of the op's plan for ``device_bytes``."""
    return {(p.case.case_id, p.grad): p for p in plan_for(op, device_bytes).cases}


def _curve_findings(op, impl, rows: list[Record], device_bytes: int, tally: Tally) -> str | None:
    by_case: dict[str, list[Record]] = {}
    for r in rows:
        by_case.setdefault(r.case_id, []).append(r)
    by_id: dict[str, list] = {}
    for p in plan_for(op, device_bytes).cases:
        by_id.setdefault(p.case.case_id, []).append(p)
    short = []
    for curve in plan_for(op, device_bytes).curves:
        points = [p for cid in curve.case_ids for p in by_id.get(cid, ())]
        if points and all(gated(op, impl, p) for p in points):
            tally.curves_gated += 1
            continue
        attempted = [r for cid in curve.case_ids for r in by_case.get(cid, ())]
        if attempted and all(r.status == SKIP for r in attempted):
            tally.curves_gated += 1
            continue
        tally.curves += 1
        timed = sum(1 for cid in curve.case_ids
                    if any(r.status == PASS and r.benchmarked for r in by_case.get(cid, ())))
        if timed >= MIN_CURVE_POINTS:
            tally.curves_ok += 1
        else:
            short.append(f"{curve.name} ({timed}/{len(curve.case_ids)} timed)")
    if not short:
        return None
    shown = "; ".join(short[:3]) + (f"; +{len(short) - 3} more" if len(short) > 3 else "")
    return f"{len(short)} curve(s) under {MIN_CURVE_POINTS} timed points: {shown}"


def _audit(records: list[Record], ops: dict, release: bool, device_bytes: int | None) -> tuple[list[Finding], Tally]:
    pairs, findings = _pairs(records, ops, release)
    by_pair: dict[tuple[str, str], list[Record]] = {}
    by_op: dict[str, list[Record]] = {}
    for r in records:
        by_pair.setdefault((r.op, r.impl), []).append(r)
        by_op.setdefault(r.op, []).append(r)
    tally = Tally(pairs=len(pairs))
    ref_canary = {(r.op, r.case_id, r.grad, r.device, r.torch): r.canary_us for r in records
                  if r.impl == REFERENCE and r.canary_us and r.status == PASS and r.op in ops
                  and is_current_for(r, ops[r.op])}

    def add(op_name, impl, kind, detail):
        findings.append(Finding(op_name, impl, kind, detail, kind in ALWAYS or (release and kind in RELEASE_GATES)))

    for op_name, impl_name in pairs:
        op = ops[op_name]
        impl = op.implementations[impl_name]
        rows = by_pair.get((op_name, impl_name), [])
        if not rows:
            why = _unmeasurable(op, impl, by_op[op_name], device_bytes)
            if why:
                add(op_name, impl_name, GATED, why)
            else:
                add(op_name, impl_name, MISSING, "no rows")
            continue
        current = [r for r in rows if is_current(r, op.ref_hash, impl.impl_hash)]
        if not current:
            add(op_name, impl_name, STALE,
                f"{len(rows)} row(s), none current ({why_stale(rows, op.ref_hash, impl.impl_hash)})")
            continue
        tally.current += 1
        passes = [r for r in current if r.status == PASS]
        if passes:
            tally.passing += 1
        else:
            counts = _counts(current)
            add(op_name, impl_name, NO_PASS, f"{len(current)} current row(s), none passes ({counts})")
        apart = _states_apart(passes, ref_canary)
        if apart:
            add(op_name, impl_name, STATES, apart)
        if any(r.benchmarked for r in passes):
            tally.timed += 1
        elif release and passes:
            add(op_name, impl_name, NO_TIMING, f"{len(passes)} pass row(s), none timed")
        if not release:
            continue
        devices = sorted({r.device for r in current})
        budget = _budget(current, device_bytes)
        if budget is None:
            add(op_name, impl_name, UNSIZED, f"curves not checked: the memory of {', '.join(devices)} is unknown "
                "(known: H200, H100, A100, cpu:*)")
        else:
            short = _curve_findings(op, impl, current, budget, tally)
            if short:
                add(op_name, impl_name, CURVES, short)
        dirty = [r for r in current if r.status in UNCLEAN_STATUSES or r.bench_error]
        if dirty:
            statuses = _counts([r for r in dirty if r.status in UNCLEAN_STATUSES])
            bench_errors = sum(1 for r in dirty if r.bench_error)
            parts = [p for p in (statuses, f"bench_error={bench_errors}" if bench_errors else "") if p]
            add(op_name, impl_name, UNCLEAN, ", ".join(parts))
    return findings, tally


def _states_apart(passes: list[Record], ref_canary: dict) -> str | None:
    """How many of the timed pass rows were timed in another device state than their case's reference row, by
    their canaries; None when none (or none can say: rows without a canary)."""
    pairs = [(r, ref_canary.get((r.op, r.case_id, r.grad, r.device, r.torch))) for r in passes
             if r.benchmarked and r.canary_us]
    pairs = [(r, ref) for r, ref in pairs if ref]
    apart = sorted(((r.canary_us / ref, r) for r, ref in pairs if abs(r.canary_us / ref - 1) > STATES_APART),
                   key=lambda t: -abs(t[0] - 1))
    if not apart:
        return None
    return (f"{len(apart)} of {len(pairs)} timed row(s) timed in another device state than their case's reference "
            f"(canary {apart[0][0]:.2f}x the reference's at worst: {apart[0][1].case}): their speedups mix states")


def _budget(rows: list[Record], device_bytes: int | None) -> int | None:
    # rows pooled across devices: the largest known device's plan holds the others' curves
    return device_bytes or max(filter(None, map(memory_of, {r.device for r in rows})), default=None)


def _unmeasurable(op, impl, op_rows: list[Record], device_bytes: int | None) -> str | None:
    """Why a pair without rows is not missing: every case measured for the op is one the fill gates for
    ``impl``; None when some measured case (or one outside the plan, whose gates are unknown) is not."""
    budget = _budget(op_rows, device_bytes)
    planned = _planned(op, budget) if budget else {}
    keys = {(r.case_id, r.grad) for r in op_rows}
    reasons = set()
    for key in keys:
        p = planned.get(key)
        why = gated(op, impl, p) if p else None
        if why is None:
            return None
        reasons.add(why)
    return (f"no rows, none due: the fill gates all {len(keys)} measured case(s) for it "
            f"({', '.join(sorted(reasons))})")


def _counts(rows: list[Record]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def check(records: list[Record], ops: dict, *, release: bool, device_bytes: int | None = None) -> Audit:
    """The audit of ``records`` as data; ``device_bytes`` overrides the memory taken from the rows' devices."""
    findings, tally = _audit(records, ops, release, device_bytes) if records else ([], Tally())
    return Audit(release, len(records), findings, tally)


def audit(records: list[Record], ops: dict, *, release: bool, device_bytes: int | None = None) -> list[Finding]:
    """Findings for the (op, impl) pairs the records call for; see the module docstring."""
    return check(records, ops, release=release, device_bytes=device_bytes).findings


def _hint(op_name: str, impl: str, kinds: set[str], ops: dict) -> list[str]:
    from .store import cache_dir

    lines = []
    if kinds & {NO_PASS, UNCLEAN}:
        lines.append(f"  fix {op_name} {impl} where it fails: fill reuses fail/crash rows until its code changes "
                     f"(--force re-measures unchanged code; error rows are always re-measured)")
    lines.append(f"  popcorn bench fill {op_name} --backend {impl}")
    problem = ops[op_name].implementations[impl].backend.problem()
    if problem:
        lines.append(f"    (on a machine where it is installed; here: {problem})")
    lines.append(f"  popcorn bench merge {cache_dir()}")
    return lines


def _table(findings: list[Finding]) -> list[str]:
    head = ("", "op", "impl", "finding", "detail")
    rows = [("FAIL" if f.blocking else "warn", f.op, f.impl, f.kind, f.detail) for f in findings]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(4)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return [fmt.format(*head).rstrip()] + [fmt.format(*r) for r in rows]


def format_check(a: Audit, ops: dict) -> str:
    """The findings, the fix per failing pair and a verdict, as ``popcorn bench check`` prints them."""
    if not a.records:
        return ("check: no records to audit; fill and merge first (`popcorn bench fill OP`, "
                "`popcorn bench merge FILES...`)")
    lines = _table(a.findings) if a.findings else []
    failing = a.failing
    if failing:
        lines.append(f"\nTo fix {len(failing)} failing pair(s):")
        for (op_name, impl), kinds in failing.items():
            lines.append(f"{op_name} {impl} ({', '.join(kinds)}):")
            lines += _hint(op_name, impl, set(kinds), ops)
    t, n = a.tally, a.tally.pairs
    verdict = [f"records: {t.current}/{n} current fingerprints", f"passes: {t.passing}/{n}", f"timings: {t.timed}/{n}"]
    if a.release:
        verdict.append(f"curves: {t.curves_ok}/{t.curves}" + (f" ({t.curves_gated} gated)" if t.curves_gated else ""))
    mode = "release" if a.release else "records"
    verdict.append(f"{mode} check {'FAILED' if failing else 'passed'}" +
                   (f" ({len(failing)} pair(s))" if failing else ""))
    lines.append(("\n" if a.findings else "") + "; ".join(verdict))
    return "\n".join(lines)


def run_check(records: list[Record], ops: dict, *, release: bool, out=sys.stdout,
              device_bytes: int | None = None) -> int:
    """Print :func:`format_check` of the audit; 0 when nothing blocks, else 1."""
    a = check(records, ops, release=release, device_bytes=device_bytes)
    print(format_check(a, ops), file=out)
    return 0 if a.passed else 1
