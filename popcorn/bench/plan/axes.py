"""The plan's axes: an op's dims (``...`` included), dtypes, scalar pools and optional tensors, with the
pools, anchors and caps the dims vocabulary (:mod:`popcorn.core.dims`) gives them."""

from __future__ import annotations

from popcorn.core.dims import Dim, dim

BATCH = "..."  # the leading variadic extent, an axis of its own: 0 -> batch=(), n -> batch=(n,)
DTYPES = ("float32", "bfloat16", "float16")
PROFILES = ("coverage", "production", "long")
TEMPORAL_CAP = 32768  # production curves and slices stop here ("full-model temporal curves to 32K")
LONG_MIN = 8192  # long-context curves start here and run through the pool (to 1M)


def dim_axes(op) -> list[str]:
    """Dim axes in order of first appearance in the input annotations; ``...`` where it leads."""
    axes: list[str] = []
    for spec in op.specs.values():
        for token in spec.tokens:
            name = BATCH if token.kind == "batch" else token.base
            if name and name not in axes:
                axes.append(name)
    return axes


def dtypes_of(op) -> tuple[str, ...]:
    return DTYPES if any(s.is_float for s in op.specs.values()) else ("float32",)


def primary_axis(op) -> str:
    """The axis whose curves also vary each scalar and optional tensor: the op's declared ``primary``,
    else its first temporal dim (attention's seq, a loss's tokens), else the last dim of its first input
    (the feature axis a row-wise op works along), else ``...``."""
    if getattr(op, "primary", None):
        return op.primary
    axes = dim_axes(op)
    temporal = [a for a in axes if a != BATCH and dim(a).temporal]
    if temporal:
        return temporal[0]
    for spec in op.specs.values():
        if spec.tokens and spec.tokens[-1].base:
            return spec.tokens[-1].base
    return axes[0] if axes else BATCH


def axis_dim(op, axis: str) -> Dim:
    """The vocabulary entry of an axis; the leading ``...`` takes the one the op names (``op.batch``)."""
    return dim(op.batch) if axis == BATCH else dim(axis)


def pool(op, axis: str) -> tuple:
    return tuple(axis_dim(op, axis).pool)


def temporal(op, axis: str) -> bool:
    return axis_dim(op, axis).temporal


def anchor(op, axis: str, profile: str) -> int:
    d = axis_dim(op, axis)
    return d.long_anchor if profile == "long" and d.long_anchor is not None else d.anchor


def batch_of(n: int | tuple | list) -> tuple[int, ...]:
    """``...`` values: 0 -> (), n -> (n,); a list or tuple is the batch itself."""
    if isinstance(n, (list, tuple)):
        return tuple(int(v) for v in n)
    return () if int(n) == 0 else (int(n),)


def axis_values(op, axis: str, profile: str) -> list:
    """A curve's values: the pool, temporal axes capped on production curves, >= LONG_MIN on long ones."""
    values = pool(op, axis)
    if profile == "long":
        return [v for v in values if v >= LONG_MIN]
    if temporal(op, axis):
        cap = axis_dim(op, axis).cap or TEMPORAL_CAP
        return [v for v in values if v <= cap]
    return list(values)


def coverage_axes(op) -> list[tuple[str, tuple]]:
    """The covering array's axes: dims (``...`` included), ``dtype``, scalars, ``+optional`` presence."""
    axes = [(a, tuple(axis_dim(op, a).coverage or axis_dim(op, a).pool)) for a in dim_axes(op)]
    axes.append(("dtype", dtypes_of(op)))
    axes += [(name, tuple(values)) for name, values in op.arg_pools.items()]
    axes += [(f"+{name}", (False, True)) for name in op.optional]
    return axes
