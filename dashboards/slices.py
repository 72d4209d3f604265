"""Slices: one axis varied with everything else fixed, the rows on it, and the fill command that
measures it (``popcorn bench fill OP --live --timeout T --slice AXIS name=value ...``).

A slice context is what :func:`popcorn.bench.slice_spec.parse_slice` returns: ``dtype``, every other
dim axis (``...`` as the batch, a list), every scalar arg and ``present`` (a tuple of the optional
tensors passed).
:func:`fill_command` writes it so that parse_slice reads back the same context.
"""

from __future__ import annotations

import json
import shlex
from decimal import Decimal

import pandas as pd

from popcorn.bench.live import DEFAULT_PORT as LIVE_PORT
from popcorn.bench.plan import BATCH, dim_axes
FILL_TIMEOUT = 300  # room for a backend's first compilation (the fill's own default)


def context_of(op, axis: str, config: str) -> dict:
    """The slice context through ``axis`` that a case (its config JSON, as stored in records) lies on."""
    c = json.loads(config)
    context: dict = {"dtype": c["dtype"]}
    for a in dim_axes(op):
        if a == axis:
            continue
        if a == BATCH:
            context[BATCH] = list(c["batch"])  # as parse_slice gives it
        elif a in c["dims"]:  # dims only an absent optional tensor names are not in the case
            context[a] = int(c["dims"][a])
    context.update(c["args"])
    context["present"] = tuple(n for n in op.optional if n in c["present"])  # parse_slice's order
    return context


def context_key(context: dict) -> str:
    """A canonical text of a context (a dict key and a widget value)."""
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in context.items()}, sort_keys=True)


def keys(op, frame: pd.DataFrame, axis: str) -> pd.Series:
    """Each row's context key through ``axis`` (computed once per distinct case config)."""
    configs = frame["config"].unique()
    by_config = {c: context_key(context_of(op, axis, c)) for c in configs}
    return frame["config"].map(by_config)


def contexts(op, frame: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Every slice context through ``axis`` found in ``frame``, with how many distinct axis values
    (points) it has, most points first: columns ``key`` (context_key), ``points``, ``rows``."""
    if frame.empty:
        return pd.DataFrame(columns=["key", "points", "rows"])
    keyed = frame.assign(_key=keys(op, frame, axis))
    out = keyed.groupby("_key").agg(points=(f"dim:{axis}", "nunique"), rows=("impl", "size")).reset_index()
    out = out.rename(columns={"_key": "key"})
    return out.sort_values(["points", "rows", "key"], ascending=[False, False, True]).reset_index(drop=True)


def rows_on(op, frame: pd.DataFrame, axis: str, context: dict) -> pd.DataFrame:
    """The rows of ``frame`` on the slice: their context through ``axis`` is exactly ``context``."""
    if frame.empty:
        return frame
    return frame[keys(op, frame, axis) == context_key(context)]


def from_key(key: str) -> dict:
    """The context a :func:`context_key` was made from."""
    context = json.loads(key)
    context["present"] = tuple(context.get("present", ()))
    return context


def _value(v) -> str:
    """A value as parse_slice reads it back: JSON, floats in plain decimals (``1e-06`` -> ``0.000001``),
    strings bare unless JSON would read them as something else."""
    if isinstance(v, float) and v == v and v not in (float("inf"), float("-inf")):
        text = format(Decimal(repr(v)), "f")
        return text if "." in text else repr(v)
    if isinstance(v, str):
        try:
            json.loads(v)
        except ValueError:
            return v
        return json.dumps(v)
    if isinstance(v, tuple):
        v = list(v)
    return json.dumps(v, separators=(",", ":"))


def slice_tokens(op, axis: str, context: dict) -> list[str]:
    """The ``--slice`` tokens: the axis, ``dtype=``, the other dims in annotation order, the scalars,
    then ``+optional`` for each optional tensor passed."""
    tokens = [axis, f"dtype={context['dtype']}"]
    tokens += [f"{a}={_value(context[a])}" for a in dim_axes(op) if a != axis and a in context]
    tokens += [f"{n}={_value(context[n])}" for n in op.scalars if n in context]
    tokens += [f"+{n}" for n in context.get("present", ())]
    return tokens


def fill_command(op, axis: str, context: dict, port: int = LIVE_PORT, timeout: int = FILL_TIMEOUT) -> str:
    """The shell command that measures the slice and streams it to the explorer."""
    live = "--live" if int(port) == LIVE_PORT else f"--live {int(port)}"
    return (f"popcorn bench fill {shlex.quote(op.name)} {live} --timeout {timeout} --slice "
            + " ".join(shlex.quote(t) for t in slice_tokens(op, axis, context)))


def planned_points(op, axis: str, context: dict, device_bytes: int) -> list[str] | None:
    """The case ids the plan measures on this slice (popcorn.bench.plan.slice_cases); None when the
    plan refuses the context."""
    from popcorn.bench.plan import slice_cases

    try:
        return [p.case.case_id for p in slice_cases(op, axis, context, device_bytes).cases]
    except ValueError:
        return None
