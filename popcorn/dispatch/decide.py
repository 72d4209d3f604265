"""The decision for one call signature: eligibility, correctness, then speed.

1. Eligibility: installed in range, gradient support, gates, predicate (Implementation.rejects),
   and the validity region learned from the rows of the call's group: the dim range the backend
   passed on, minus failing divisibility, minus holes (calls whose nearest record failed).
2. Correctness: a failing or crashing row for this exact case blocks the backend (the
   nearest record at distance zero, so one rule with holes).
3. Speed: each backend's nearest measured neighbour (log-shape distance) in the group gives a
   speedup over the reference (step time when gradients are needed, forward otherwise); the
   best wins unless it beats the reference by less than BAND.

A group is: device (the same name, else a sibling of the same type), dtype, gradient mode,
present optionals and non-float scalar args. A forward-only call also reads gradient-mode rows
(fills measure in gradient mode; their forward was checked and timed), its own mode first.
Evidence from other torch/backend versions or a sibling device ranks too, with a one-time warning.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from functools import reduce

import torch

from popcorn.core.devices import device_name, device_of
from popcorn.schema import FAILED, JUDGED, PASS, REFERENCE

from .evidence import rows_for

BAND = 0.03  # the reference stays unless a backend is predicted at least 3% faster
_WARNED: set = set()


@dataclass
class Verdict:
    impl: str
    eligible: bool
    why: str
    speedup: float | None = None
    cited: dict | None = None  # the row the verdict rests on


@dataclass
class Decision:
    impl: str
    verdicts: list[Verdict] = field(default_factory=list)

    def explain(self, named=str) -> str:
        """The decision and every backend's verdict; ``named`` renders backend names."""
        why = "no backend is predicted faster by the evidence" if self.impl == REFERENCE else \
            next(v.why for v in self.verdicts if v.impl == self.impl)
        lines = [f"runs {named(self.impl)}: {why}"]
        for v in self.verdicts:
            mark = "ok " if v.eligible else "no "
            lines.append(f"  {mark}{v.impl}: {v.why}")
            if v.cited:
                c = v.cited
                lines.append(f"       record: {c['case_id']} {c['dtype']} dims={c['dims']} batch={list(c['batch'])} "
                             f"grad={c['grad']} on {c['device']} (torch {c['torch']}): {c['status']}, "
                             f"fwd {c.get('fwd_ms')} ms, step {c.get('step_ms')} ms")
        return "\n".join(lines)


def call_group(op, arguments: dict, binding) -> dict:
    """What rows must share with the call to be its evidence (dtype None: mixed float dtypes)."""
    case = op.case(arguments, binding)
    return {
        "case_id": case.case_id if case else None, "dims": dict(binding.dims),
        "batch": _rows(op.batch, tuple(binding.batch or ())), "flat": op.batch == "token_rows",
        "dtype": case.dtype if case else None, "args": {n: arguments[n] for n in op.scalars},
        "present": tuple(sorted(n for n in op.optional if arguments.get(n) is not None)),
        "device": device_of(arguments),
    }


def _rows(kind: str, batch: tuple) -> tuple:
    """A row-wise op's leading dims as one count of rows: (1, 4096) tokens run as (4096,) do, so a
    (batch, seq, hidden) training call reads the plan's (rows, hidden) records."""
    return (math.prod(batch),) if kind == "token_rows" else batch


def _row_batch(row: dict, call: dict) -> tuple:
    return _rows("token_rows" if call["flat"] else "...", row["batch"])


def _same_group(row: dict, call: dict, grad: bool) -> bool:
    # a gradient-mode row speaks for a forward-only call too: its forward was checked and timed
    if row["dtype"] != call["dtype"] or (grad and not row["grad"]) or row["present"] != call["present"]:
        return False
    for k, v in call["args"].items():
        if not isinstance(v, float) and row["args"].get(k, v) != v:
            return False
    return set(row["dims"]) == set(call["dims"]) and len(_row_batch(row, call)) == len(call["batch"])


def _distance(row: dict, call: dict) -> float:
    d = sum((math.log1p(row["dims"][k]) - math.log1p(v)) ** 2 for k, v in call["dims"].items())
    d += sum((math.log1p(a) - math.log1p(b)) ** 2 for a, b in zip(_row_batch(row, call), call["batch"]))
    d += sum(1.0 for k, v in call["args"].items() if isinstance(v, float) and row["args"].get(k) != v)
    return d


def row_ms(row: dict, grad: bool, prefix: str = "") -> float | None:
    """The device time a row ranks by: the step with gradients, else the forward."""
    return row.get(f"{prefix}step_ms" if grad else f"{prefix}fwd_ms")


def host_ms(row: dict, grad: bool) -> float | None:
    """Host wall time per call (not synchronized): what an eager loop pays the CPU for the call.
    A gradient row without a step host time (measured before that column) falls back to its forward's:
    the step pays at least that much, so the bound still keeps launch-bound backends out of eager loops."""
    us = row.get("step_host_us") if grad else None
    us = row.get("host_us") if us is None else us
    return None if us is None else us / 1000


def row_cost(row: dict, grad: bool, graph: bool) -> float | None:
    """What a call costs where it runs: device time inside a compiled graph or CUDA graph; in eager
    code the larger of device time and host time, since a launch-bound call waits on the host."""
    device = row_ms(row, grad)
    host = None if graph else host_ms(row, grad)
    return device if device is None or host is None else max(device, host)


def _region(name: str, rows: list[dict], call: dict) -> str | None:
    """Why the call lies outside the region the backend passed on, or None when inside."""
    passed = [r for r in rows if r["status"] == PASS]
    failed = [r for r in rows if r["status"] in FAILED]
    for dim, v in call["dims"].items():
        values = [r["dims"][dim] for r in passed]
        lo, hi = min(values), max(values)
        if not lo <= v <= hi:
            return f"outside its validity region: {dim}={v} outside [{lo}, {hi}]"
        g = reduce(math.gcd, values)
        if g > 1 and v % g and any(r["dims"][dim] % g for r in failed):
            return f"outside its validity region: {dim}={v} is not a multiple of {g} (it failed off multiples)"
    return None


def _reference_row(rows: list[dict], row: dict) -> dict | None:
    for r in rows:
        if r["impl"] == REFERENCE and r["case_id"] == row["case_id"] and r["grad"] == row["grad"] \
                and r["device"] == row["device"] and r["status"] == PASS:
            return r
    return None


def _reference_cost(ref: dict | None, row: dict, grad: bool, graph: bool) -> float | None:
    """The reference's cost beside ``row``: its own row of that case (``ref``: device and host time),
    else the device times the row carries (``ref_*``)."""
    if ref is not None and row_ms(ref, grad):
        return row_cost(ref, grad, graph)
    return row_ms(row, grad, "ref_")


def _times(row: dict, grad: bool) -> str:
    host = host_ms(row, grad)
    return f"device {row_ms(row, grad):.4g} ms" + ("" if host is None else f", host {host * 1000:.3g} us")


def decide(op, arguments: dict, grad: bool, rows: list[dict] | None = None, here: str | None = None,
           graph: bool = False) -> Decision:
    """The backend for this call. ``graph``: the call runs in a compiled graph (rank by device time;
    eager calls rank by the larger of device and host time). ``rows`` and ``here`` (a device name)
    replace the loaded evidence and the call's device: benchmarks/dispatch_regret.py replays
    recorded cases with them."""
    binding = op.bind(arguments)
    call = call_group(op, arguments, binding)
    here = here or device_name(call["device"])
    on_cpu = here.startswith("cpu")
    all_rows = [r for r in (rows_for(op) if rows is None else rows) if _same_group(r, call, grad)]
    exact_id = call["case_id"]
    verdicts = []
    for name, impl in op.implementations.items():
        if name == REFERENCE:
            continue
        mine = [r for r in all_rows if r["impl"] == name]
        reason = impl.rejects(arguments, grad)
        if reason and any(r["status"] == PASS and r["device"].startswith("cpu") == on_cpu for r in mine):
            missing = impl.backend.problem()  # asked again only where a notice may be due
            if missing:
                _notice_missing(impl.backend, op.name, name, missing)
        if reason:
            verdicts.append(Verdict(name, False, reason))
            continue
        same = [r for r in mine if r["device"] == here]
        sibling = [r for r in mine if r["device"] != here and r["device"].startswith("cpu") == on_cpu]
        mine = same or sibling
        mine = [r for r in mine if r["grad"] == grad] or mine  # the call's own gradient mode first
        if not mine:
            verdicts.append(Verdict(name, False, "no evidence for this device, dtype, gradient mode and arguments"))
            continue
        judged = [r for r in mine if r["status"] in JUDGED]
        nearest = min(judged, key=lambda r: (_distance(r, call), r["status"] != PASS, r["case_id"]), default=None)
        failed = nearest is not None and nearest["status"] != PASS
        if failed and nearest["case_id"] == exact_id:
            verdicts.append(Verdict(name, False, f"failed on this exact case: {nearest.get('reason')}", cited=nearest))
            continue
        if not any(r["status"] == PASS for r in mine):
            verdicts.append(Verdict(name, False, "never passed in this group", cited=mine[0]))
            continue
        outside = _region(name, mine, call)
        if outside:
            verdicts.append(Verdict(name, False, outside))
            continue
        if failed:  # a failure inside the passing range claims its neighbourhood
            verdicts.append(Verdict(name, False, f"in a hole of its validity region: its nearest record "
                                    f"{nearest['status']}ed ({nearest.get('reason')})", cited=nearest))
            continue
        timed = [r for r in mine if r["status"] == PASS and row_ms(r, grad)]
        if not timed:
            verdicts.append(Verdict(name, False, "passed but was never timed here"))
            continue
        near = min(timed, key=lambda r: (_distance(r, call), r["case_id"]))
        ref_row = _reference_row(all_rows, near)
        ref = _reference_cost(ref_row, near, grad, graph)
        if not ref:
            verdicts.append(Verdict(name, False, "no reference timing beside its nearest record", cited=near))
            continue
        speedup = ref / row_cost(near, grad, graph)
        _warn_foreign(op.name, name, near, here)
        beside = f" ({_times(near, grad)}; the reference {_times(ref_row, grad)})" if ref_row else ""
        where = "in a compiled graph (device time)" if graph else "in eager code (max of device and host time)"
        verdicts.append(Verdict(name, True, f"{speedup:.2f}x the reference {where} at its nearest record{beside}",
                                speedup, near))
    ranked = sorted((v for v in verdicts if v.eligible), key=lambda v: -v.speedup)
    best = ranked[0] if ranked and ranked[0].speedup >= 1 + BAND else None
    return Decision(best.impl if best else REFERENCE, verdicts)


def _warn_foreign(op: str, impl: str, row: dict, here: str) -> None:
    notes = []
    if row["device"] != here:
        notes.append(f"device {row['device']} (here {here})")
    if row["torch"] != torch.__version__:
        notes.append(f"torch {row['torch']} (here {torch.__version__})")
    if notes and (op, impl) not in _WARNED:
        _WARNED.add((op, impl))
        warnings.warn(f"popcorn: ranking {op}:{impl} on evidence from {', '.join(notes)}; "
                      f"run `popcorn bench fill {op} --backend {impl}` here to measure it", stacklevel=4)


def _notice_missing(backend, op: str, impl: str, problem: str) -> None:
    """One notice per library that is missing (or out of range) while the evidence has it passing on
    calls like this one: those calls run elsewhere, and installing it may make them faster."""
    if ("missing", backend.name) not in _WARNED:
        _WARNED.add(("missing", backend.name))
        warnings.warn(f"popcorn: {problem}; the evidence has {op}:{impl} passing on calls like this one, which "
                      f"run another backend meanwhile (this notice is shown once per library)", stacklevel=4)
