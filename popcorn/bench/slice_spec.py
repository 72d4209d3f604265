"""CLI ``--slice`` tokens (``AXIS name=JSON ... +optional``) parsed into the planner's slice context."""

from __future__ import annotations

import json

from .plan import BATCH, dim_axes
from .plan.axes import batch_of
from .plan.slices import valid_names


def _decode(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _snap(value, pool):
    """A context value onto the pool value it means (1e-06 vs 0.000001, 0 vs 0.0, 'True' vs True)."""
    for p in pool:
        if type(p) is type(value) and p == value:
            return p
    for p in pool:
        if p == value or str(p) == str(value) or repr(p) == str(value):
            return p
    return value


def parse_slice(op, tokens: list[str]) -> tuple[str, dict]:
    """CLI ``--slice`` tokens ``AXIS name=JSON ... +optional`` -> (axis, context) for :func:`slice_cases`.

    Values are JSON-decoded when possible (else kept as strings) and snapped onto the matching
    pool value; ``...=[8]`` fixes the batch. Unknown names raise ValueError listing valid ones.
    """
    tokens = list(tokens)
    axes = dim_axes(op)
    if not tokens:
        raise ValueError(f"{op.name}: --slice needs an axis first; axes are {', '.join(axes)}")
    axis, rest = tokens[0], tokens[1:]
    if axis not in axes:
        raise ValueError(f"{op.name}: unknown slice axis {axis!r}; axes are {', '.join(axes)}")
    valid = valid_names(op)
    context: dict = {}
    present: list[str] = []
    for tok in rest:
        if tok.startswith("+"):
            name = tok[1:]
            if name not in op.optional:
                raise ValueError(f"{op.name}: unknown optional tensor {name!r}; optional: "
                                 f"{', '.join(op.optional) or 'none'}")
            if name not in present:
                present.append(name)
            continue
        name, eq, raw = tok.partition("=")
        if not eq:
            raise ValueError(f"{op.name}: bad slice token {tok!r}; use name=JSON or +optional")
        if name not in valid:
            raise ValueError(f"{op.name}: unknown slice name {name!r}; valid: {', '.join(valid)}")
        value = _decode(raw)
        if name == BATCH:
            if not (isinstance(value, int) or (isinstance(value, list) and all(isinstance(v, int) for v in value))):
                raise ValueError(f"{op.name}: '...' takes a JSON list of ints such as [8], got {raw!r}")
            value = list(batch_of(value))
        elif name == "dtype":
            value = str(value)
        elif name in op.scalars:
            value = _snap(value, op.arg_pools[name])
        elif not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{op.name}: dim {name!r} takes an int, got {raw!r}")
        context[name] = value
    context["present"] = tuple(n for n in op.optional if n in present)
    return axis, context
