"""op.validate / op.benchmark / bench mode: measure every eligible backend on one exact call.

Results become Records written to the user cache (never to bundled reports), one log line per
op, backend and case on the ``popcorn.bench`` logger.
"""

from __future__ import annotations

import json
import logging

import torch

from popcorn.core import Case, DispatchError
from popcorn.core.devices import device_name, device_of  # noqa: F401 - re-exported for fill
from popcorn.core.inputs import make_inputs
from popcorn.core.registry import REFERENCE, Implementation, Op
from popcorn.schema import REFERENCE_TIMED, is_current_for

from . import lane, store
from .compare import Result, check, describe, free_memory, is_oom
from .record import ERROR, OOM, PASS, Record
from .timing import measure

log = logging.getLogger("popcorn.bench")

DEFAULT_TRIALS = 10


def case_of(op: Op, arguments: dict) -> Case:
    """The Case an exact call represents; raises DispatchError when it has no single float dtype."""
    case = op.case(arguments)
    if case is None:
        floats = sorted({str(v.dtype) for v in arguments.values() if isinstance(v, torch.Tensor)
                         and v.is_floating_point()})
        raise DispatchError(f"{op.name}: a benchmarked call needs one float dtype, got {floats}")
    return case


def _record(op: Op, impl: Implementation, case: Case, result: Result, device: torch.device,
            ref_timing: dict) -> Record:
    fwd, bwd = result.gauges_json()
    row = Record(
        op=op.name, impl=impl.name, case_id=case.case_id, case=case.label, config=json.dumps(case.config()),
        device=device_name(device), torch=torch.__version__,
        backend_version=impl.backend.version if impl.backend.package else None,
        ref_hash=op.ref_hash, impl_hash=impl.impl_hash, status=result.status, grad=result.grad,
        reason=result.reason, reps=result.reps if result.status == PASS else 0, fwd=fwd, bwd=bwd,
        timer=result.timer, bench_error=result.bench_error, **result.timing,
    )
    for k in REFERENCE_TIMED:
        setattr(row, f"ref_{k}", ref_timing.get(k))
    return row


def _log(row: Record) -> None:
    def ms(v):
        return "-" if v is None else f"{v:.4g}ms"
    log.info("%s:%s %s grad=%s %s fwd %s (torch %s) bwd %s (torch %s)%s", row.op, row.impl, row.case, row.grad,
             row.status, ms(row.fwd_ms), ms(row.ref_fwd_ms), ms(row.bwd_ms), ms(row.ref_bwd_ms),
             f" - {row.reason}" if row.reason else "")


def run_case(op: Op, impl: Implementation, case: Case, draw, grad: bool, device: torch.device, *,
             trials: int, timing: bool, truths=None) -> Result:
    """Check ``impl`` against the reference on ``case`` and, after a pass, time it (its timed samples
    hold the device alone: :mod:`popcorn.bench.lane`). ``truths``: the reference's side of each trial, when shared."""
    result = check(op.reference, lambda **a: impl.invoke(a), draw, trials=trials, grad=grad, frozen=impl.no_grad,
                   out_dtypes=impl.expected_dtypes, truths=truths)
    if result.passed and timing:
        held = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
        try:
            with lane.phase("timing"):  # measure holds the device alone for its timed samples
                result.timing, result.timer = measure(lambda **a: impl.invoke(a), draw(0), grad, device)
        except Exception as e:  # noqa: BLE001 - a timing failure never overwrites correctness
            if is_oom(e):
                result.status, result.reason = OOM, f"timing: {describe(e)}"
            else:
                result.bench_error = describe(e)
        finally:
            with lane.phase("cleanup"):
                free_memory(held)
    return result


def eligible(op: Op, arguments: dict, grad: bool, backends=None) -> list[Implementation]:
    out = []
    for name, impl in op.implementations.items():
        if name == REFERENCE or (backends is not None and name not in backends):
            continue
        if impl.rejects(arguments, grad) is None:
            out.append(impl)
    return out


def benchmark(op: Op, args: tuple, kwargs: dict, *, trials: int = DEFAULT_TRIALS, timing: bool = True,
              backends=None, write: bool = True) -> list[Record]:
    """Validate (and time) every eligible non-reference backend on this exact call.

    The first trial uses the caller's tensors; later trials draw fresh seeded inputs of the same
    case. Returns one Record per backend (the reference's own row is written to the cache too).
    """
    arguments = op.arguments(args, kwargs)
    case = case_of(op, arguments)
    grad = op.needs_grad(arguments)
    device = device_of(arguments)

    def draw(trial: int) -> dict:
        return arguments if trial == 0 else make_inputs(op, case, seed=trial, device=device)

    reference = op.implementations[REFERENCE]
    ref_result = run_case(op, reference, case, draw, grad, device, trials=trials, timing=timing)
    ref_row = _record(op, reference, case, ref_result, device, ref_result.timing)
    rows = []
    for impl in eligible(op, arguments, grad, backends):
        if ref_result.status in (OOM, ERROR):
            result = Result(ref_result.status, f"reference: {ref_result.reason}", grad=grad)
        else:
            result = run_case(op, impl, case, draw, grad, device, trials=trials, timing=timing)
        rows.append(_record(op, impl, case, result, device, ref_result.timing))
    for row in [ref_row] + rows:
        _log(row)
    if write:
        store.write([ref_row] + rows)
    return rows


def missing(op: Op, arguments: dict) -> list[str]:
    """Eligible backends with no current, conclusive, timed row for this exact call in the user cache."""
    case = case_of(op, arguments)
    grad = op.needs_grad(arguments)
    device = device_name(device_of(arguments))
    have = {r.impl for r in store.read(op.name, bad=[])  # unreadable lines are not evidence
            if r.case_id == case.case_id and r.grad == grad and r.device == device and r.torch == torch.__version__
            and r.conclusive and (r.benchmarked or r.status != PASS)
            and is_current_for(r, op)}
    return [i.name for i in eligible(op, arguments, grad) if i.name not in have]


_UNMEASURABLE: set[tuple[str, str]] = set()


def ensure(op: Op, args: tuple, kwargs: dict) -> list[Record]:
    """Bench mode: measure the call's backends that lack evidence, synchronously; user cache only.

    A call that is no single case (mixed float dtypes, as in mixed-precision training) is not
    measured: it runs normally, and the reason is logged once per op."""
    arguments = op.arguments(args, kwargs)
    if op.case(arguments) is None:
        floats = sorted({str(v.dtype).removeprefix("torch.") for v in arguments.values()
                         if isinstance(v, torch.Tensor) and v.is_floating_point()})
        why = f"its float inputs mix dtypes ({', '.join(floats)}); cases have one dtype"
        if (op.name, why) not in _UNMEASURABLE:
            _UNMEASURABLE.add((op.name, why))
            log.warning("%s: bench mode does not measure this call: %s", op.name, why)
        return []
    todo = missing(op, arguments)
    if not todo:
        return []
    with torch.no_grad() if not op.needs_grad(arguments) else torch.enable_grad():
        return benchmark(op, args, kwargs, backends=set(todo))
