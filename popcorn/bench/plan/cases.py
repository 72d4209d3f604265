"""Planned cases: building them from axis values, repairing them onto the op's declared constraints,
their gradient mode, their memory footprint and whether it fits the device."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from popcorn.core.case import Case
from popcorn.core.constraints import repaired
from popcorn.core.dims import dim
from popcorn.core.inputs import shape_of

from .axes import BATCH, DTYPES, PROFILES, batch_of, dtypes_of

FANIN_LIMIT = 32768  # fp16: a gradient reduced over this many positions is planned forward-only
HEADROOM = 0.9  # fraction of device memory the correctness copies may use
_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
_INT_BYTES = 8


@dataclass(frozen=True)
class Planned:
    """One planned measurement: a repaired case, its gradient mode, stratum and series."""

    case: Case
    grad: bool
    stratum: str  # f"{profile}-{dtype}-{'grad' if grad else 'fwd'}"
    series: str  # "coverage" or the name of the first curve that planned the case


def used_dims(op, present) -> set[str]:
    used = set()
    for name, spec in op.specs.items():
        if not spec.optional or name in present:
            used.update(spec.names)
    return used


def build(op, dims: dict, dtype: str, args: dict, present) -> Case:
    """A Case from axis values (``...`` among ``dims``); dims only absent optionals name are dropped."""
    present = tuple(n for n in op.optional if n in set(present))
    used = used_dims(op, present)
    batch = batch_of(dims.get(BATCH, 0))
    return Case({k: int(v) for k, v in dims.items() if k != BATCH and k in used}, batch, dtype,
                {n: args[n] for n in op.scalars}, present)


def repair(op, case: Case) -> Case:
    """Snap independently drawn values onto the op's declared constraints (``op.constraints``, the
    plan-only ones included); idempotent, and ``case`` itself when it already holds them all."""
    dims, batch, args = repaired(op.constraints, case.dims, case.batch, case.args)
    if dims == case.dims and args == case.args and batch == case.batch:
        return case
    return Case(dims, batch, case.dtype, args, case.present)


def _inputs(op, case: Case):
    for name, spec in op.specs.items():
        if not spec.optional or name in case.present:
            yield name, spec


def _itemsize(spec, dtype: str) -> int:
    if not spec.is_float:
        return _INT_BYTES
    names = {str(d).removeprefix("torch.") for d in spec.dtypes}
    if dtype in names:
        return _ITEMSIZE[dtype]
    # make_inputs casts to the first admitted dtype (sorted by name) when the case dtype is not admitted
    fallback = str(sorted(spec.dtypes, key=str)[0]).removeprefix("torch.")
    return _ITEMSIZE.get(fallback, 4)


def estimated_bytes(op, case: Case) -> int:
    """Input bytes from the annotations alone: case-dtype itemsize for floats, 8 per int element."""
    return sum(math.prod(shape_of(spec, case)) * _itemsize(spec, case.dtype) for _, spec in _inputs(op, case))


def wants_grad(op, case: Case) -> bool:
    """False for ops without floating inputs and for fp16 cases the fan-in rule makes forward-only.

    fp16: a floating input whose annotation lacks a temporal dim of the case (seq/tokens/total) has
    its gradient reduced over that extent, times the batch product when it lacks ``...`` while the
    case has a batch; an extent >= 32768 plans the case forward-only.
    """
    floats = [spec for _, spec in _inputs(op, case) if spec.is_float]
    if not floats:
        return False
    if case.dtype != "float16":
        return True
    temporal = [n for n in sorted(case.dims) if dim(n).temporal]
    for spec in floats:
        names = set(spec.names)
        extent = math.prod(case.dims[n] for n in temporal if n not in names)
        if case.batch and not spec.variadic:
            extent *= math.prod(case.batch)
        if extent >= FANIN_LIMIT:
            return False
    return True


def copies(dtype: str, grad: bool) -> int:
    """Resident input copies of one correctness run: native, fp64 truth, gradients and workspace."""
    r = max(1, 8 // _ITEMSIZE.get(dtype, 4))
    return 7 + 2 * r if grad else 5 + r


def workspace_bytes(op, case: Case, grad: bool) -> int:
    """The reference's declared intermediates in the fp64 truth run plus the native one (at least fp32);
    autograd keeps about as much again for the backward."""
    if op.workspace is None:
        return 0
    return op.workspace(case) * (8 + 4) * (2 if grad else 1)


def footprint(op, case: Case, grad: bool, inputs: int | None = None) -> int:
    """Bytes one correctness run holds at once: input copies (native, truth, gradients) and workspace;
    ``inputs``: the case's estimated_bytes when already known."""
    inputs = estimated_bytes(op, case) if inputs is None else inputs
    return inputs * copies(case.dtype, grad) + workspace_bytes(op, case, grad)


def fits(op, case: Case, grad: bool, device_bytes: int) -> bool:
    return footprint(op, case, grad) <= device_bytes * HEADROOM


def stratum(profile: str, dtype: str, grad: bool) -> str:
    return f"{profile}-{dtype}-{'grad' if grad else 'fwd'}"


def strata_of(op) -> list[str]:
    """Every stratum the op's plan could have on some device, in plan order: PROFILE-DTYPE-grad|fwd."""
    return [stratum(p, d, g) for p in PROFILES for d in dtypes_of(op) for g in (True, False)]


def stratum_key(s: str) -> tuple:
    profile, dtype, mode = s.split("-")
    return (PROFILES.index(profile) if profile in PROFILES else len(PROFILES),
            DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES), mode != "grad", s)


def slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", str(value)).strip("_").lower() or "none"


def gated(op, impl, planned: Planned) -> str | None:
    """Why ``impl`` cannot run ``planned`` whatever the tensors hold (its static gates), or None. A
    forward-only backend is not gated on a gradient case: the fill measures its forward there."""
    if not impl.admits_static(planned.case.dtype, planned.case.args, planned.case.present):
        return "gate"
    return None
