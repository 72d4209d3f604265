"""Slices: one axis varied over its production pool in exactly a given context (the explorer's view)."""

from __future__ import annotations

import hashlib
import json

from .axes import BATCH, axis_values, batch_of, dim_axes, dtypes_of
from .cases import used_dims
from .curves import Collector, Plan, curve, sweep


def valid_names(op) -> list[str]:
    """The names a slice context may fix: dim axes, ``dtype`` and scalars."""
    return [a for a in dim_axes(op)] + ["dtype"] + list(op.scalars)


def slice_cases(op, axis: str, context: dict, device_bytes: int) -> Plan:
    """Vary ``axis`` over its production pool (temporal capped at 32K) in exactly ``context``.

    ``context`` holds ``dtype``, every other dim (``...`` as a list, or 0/n), every scalar arg and
    optionally ``present`` (the optional tensors passed; default none). A point that repair would
    change in any fixed value is dropped, never altered.
    """
    axes = dim_axes(op)
    if axis not in axes:
        raise ValueError(f"{op.name}: unknown slice axis {axis!r}; axes are {', '.join(axes)}")
    present = tuple(context.get("present", ()))
    bad = [n for n in present if n not in op.optional]
    if bad:
        raise ValueError(f"{op.name}: {', '.join(bad)} not optional tensors; "
                         f"optional: {', '.join(op.optional) or 'none'}")
    unknown = [k for k in context if k not in valid_names(op) and k != "present"]
    if unknown:
        raise ValueError(f"{op.name}: unknown slice context {', '.join(unknown)}; valid: {', '.join(valid_names(op))}")
    used = used_dims(op, present)
    needed = ["dtype"] + [a for a in axes if a != axis and (a == BATCH or a in used)] + list(op.scalars)
    missing = [k for k in needed if k not in context]
    if missing:
        raise ValueError(f"{op.name}: the slice context lacks {', '.join(missing)}")
    dtype = context["dtype"]
    if dtype not in dtypes_of(op):
        raise ValueError(f"{op.name}: dtype {dtype!r} is not one of {', '.join(dtypes_of(op))}")
    fixed = {a: context[a] for a in axes if a != axis and a in context}
    if BATCH in fixed:
        fixed[BATCH] = batch_of(fixed[BATCH])
    args = {n: context[n] for n in op.scalars}
    canonical = [axis, dtype, sorted((k, list(v) if isinstance(v, tuple) else int(v)) for k, v in fixed.items()),
                 sorted((k, repr(v)) for k, v in args.items()), sorted(present)]
    digest = hashlib.sha1(json.dumps(canonical).encode()).hexdigest()[:8]
    name = f"curve:slice:{axis}:{dtype}:ctx-{digest}"
    collector = Collector(op, device_bytes)
    ordered = sweep(op, axis, axis_values(op, axis, "production"), fixed, dtype, args, present, collector,
                    "production", name)
    curves = [curve(name, "slice", axis, dtype, f"ctx-{digest}", ordered, args, present)] if ordered else []
    return collector.plan(curves)
