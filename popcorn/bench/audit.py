"""``popcorn bench check``: are the records evidence for today's code?

Audits (op, implementation) pairs against the registry. The reference (``torch``) is what every
pair is measured against and is not audited itself. Without ``release`` the pairs are those that
have rows; with it, every registered implementation of every op that has rows.

Always blocking:

* ``missing``: the pair has no rows (only reachable with ``release``);
* ``stale``: rows, but none whose ref_hash and impl_hash match today's code.

Release gates (reported always where computed, blocking only with ``release``):

* ``no_pass``: current rows, none passes (computed always);
* ``no_timing``: no current pass row carries a forward time;
* ``curves``: a named curve of the op's case plan has fewer than 2 timed current pass points; a
  curve the implementation's static gates refuse, or whose every attempted point is a ``skip``,
  is gated rather than short;
* ``unclean``: current rows with status fail/crash/error or with a bench_error.

A missing or stale pair gets no further findings: everything else follows from re-measuring it.
Rows of ops or implementations that are no longer registered are reported (``unregistered``)
but never block.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

from .record import CRASH, ERROR, FAIL, PASS, SKIP, Record

REFERENCE = "torch"  # popcorn.core.registry.REFERENCE, without importing torch here
H200_BYTES = 141 * 10**9

MISSING, STALE, NO_PASS, NO_TIMING, CURVES, UNCLEAN, UNREGISTERED = (
    "missing", "stale", "no_pass", "no_timing", "curves", "unclean", "unregistered")
ALWAYS = frozenset({MISSING, STALE})
RELEASE_GATES = frozenset({NO_PASS, NO_TIMING, CURVES, UNCLEAN})
UNCLEAN_STATUSES = frozenset({FAIL, CRASH, ERROR})
MIN_CURVE_POINTS = 2


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


@functools.lru_cache(maxsize=64)
def _plan(op, device_bytes: int):
    from .plan import case_plan

    return case_plan(op, device_bytes)


def plan_for(op, device_bytes: int = H200_BYTES):
    """The op's case plan, computed once per (op, device_bytes) per process."""
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


def _static_gate_admits(op, impl, curve) -> bool:
    """Whether ``impl``'s declared gates admit the curve's dtype, scalar args and optional tensors."""
    return impl.admits_static(curve.dtype, curve.args, curve.present)


def _curve_findings(op, impl, rows: list[Record], device_bytes: int, tally: Tally) -> str | None:
    by_case: dict[str, list[Record]] = {}
    for r in rows:
        by_case.setdefault(r.case_id, []).append(r)
    short = []
    for curve in plan_for(op, device_bytes).curves:
        if not _static_gate_admits(op, impl, curve):
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


def _audit(records: list[Record], ops: dict, release: bool, device_bytes: int) -> tuple[list[Finding], Tally]:
    pairs, findings = _pairs(records, ops, release)
    by_pair: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        by_pair.setdefault((r.op, r.impl), []).append(r)
    tally = Tally(pairs=len(pairs))

    def add(op_name, impl, kind, detail):
        findings.append(Finding(op_name, impl, kind, detail, kind in ALWAYS or (release and kind in RELEASE_GATES)))

    for op_name, impl_name in pairs:
        op = ops[op_name]
        impl = op.implementations[impl_name]
        rows = by_pair.get((op_name, impl_name), [])
        if not rows:
            add(op_name, impl_name, MISSING, "no rows")
            continue
        current = [r for r in rows if r.current(op.ref_hash, impl.impl_hash)]
        if not current:
            which = []
            if not any(r.ref_hash == op.ref_hash for r in rows):
                which.append("reference")
            if not any(r.impl_hash == impl.impl_hash for r in rows):
                which.append("implementation")
            why = " and ".join(which) + " changed" if which else "no row matches both fingerprints"
            add(op_name, impl_name, STALE, f"{len(rows)} row(s), none current ({why})")
            continue
        tally.current += 1
        passes = [r for r in current if r.status == PASS]
        if passes:
            tally.passing += 1
        else:
            counts = _counts(current)
            add(op_name, impl_name, NO_PASS, f"{len(current)} current row(s), none passes ({counts})")
        if any(r.benchmarked for r in passes):
            tally.timed += 1
        elif release and passes:
            add(op_name, impl_name, NO_TIMING, f"{len(passes)} pass row(s), none timed")
        if not release:
            continue
        short = _curve_findings(op, impl, current, device_bytes, tally)
        if short:
            add(op_name, impl_name, CURVES, short)
        dirty = [r for r in current if r.status in UNCLEAN_STATUSES or r.bench_error]
        if dirty:
            statuses = _counts([r for r in dirty if r.status in UNCLEAN_STATUSES])
            bench_errors = sum(1 for r in dirty if r.bench_error)
            parts = [p for p in (statuses, f"bench_error={bench_errors}" if bench_errors else "") if p]
            add(op_name, impl_name, UNCLEAN, ", ".join(parts))
    return findings, tally


def _counts(rows: list[Record]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))


def audit(records: list[Record], ops: dict, *, release: bool, device_bytes: int = H200_BYTES) -> list[Finding]:
    """Findings for the (op, impl) pairs the records call for; see the module docstring."""
    return _audit(records, ops, release, device_bytes)[0]


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


def run_check(records: list[Record], ops: dict, *, release: bool, out=sys.stdout,
              device_bytes: int = H200_BYTES) -> int:
    """Print the findings, the fix per failing pair and a verdict; 0 when nothing blocks, else 1."""
    if not records:
        print("check: no records to audit; fill and merge first (`popcorn bench fill OP`, "
              "`popcorn bench merge FILES...`)", file=out)
        return 1
    findings, tally = _audit(records, ops, release, device_bytes)
    if findings:
        print("\n".join(_table(findings)), file=out)
    failing: dict[tuple[str, str], set[str]] = {}
    for f in findings:
        if f.blocking and f.kind != UNREGISTERED:
            failing.setdefault((f.op, f.impl), set()).add(f.kind)
    if failing:
        print(f"\nTo fix {len(failing)} failing pair(s):", file=out)
        for (op_name, impl), kinds in failing.items():
            print(f"{op_name} {impl} ({', '.join(sorted(kinds))}):", file=out)
            print("\n".join(_hint(op_name, impl, kinds, ops)), file=out)
    n = tally.pairs
    verdict = [f"records: {tally.current}/{n} current fingerprints", f"passes: {tally.passing}/{n}",
               f"timings: {tally.timed}/{n}"]
    if release:
        verdict.append(f"curves: {tally.curves_ok}/{tally.curves}" +
                       (f" ({tally.curves_gated} gated)" if tally.curves_gated else ""))
    mode = "release" if release else "records"
    verdict.append(f"{mode} check {'FAILED' if failing else 'passed'}" +
                   (f" ({len(failing)} pair(s))" if failing else ""))
    print(("\n" if findings else "") + "; ".join(verdict), file=out)
    return 1 if failing else 0
