"""Named curves: the plan's production and long-context series of an op, and the rows on them.

The plan (:func:`popcorn.bench.plan.case_plan`) names each one-axis curve and lists its case ids;
a row is on a curve when its case id is. Rows on no named curve are the sparse coverage samples,
shown apart. The plan is made for a device large enough that no curve loses points to memory:
the rows say what was measured.
"""

from __future__ import annotations

from functools import lru_cache

import pandas as pd

PLAN_BYTES = 1 << 40  # plan as if for a 1 TiB device: every curve point any device could hold


@lru_cache(maxsize=64)
def named_curves(op) -> tuple:
    """The op's named curves (production then long-context), as the plan names them."""
    from popcorn.bench.plan import case_plan

    return tuple(case_plan(op, PLAN_BYTES).curves)


def label(curve) -> str:
    """``production · normalized_shape · bfloat16`` (plus the variant when not the base one)."""
    parts = [curve.profile, curve.axis, curve.dtype] + ([curve.variant] if curve.variant != "base" else [])
    return " · ".join(parts)


def curve_ids(op) -> frozenset:
    """Every case id on some named curve."""
    return frozenset(i for c in named_curves(op) for i in c.case_ids)


def with_points(op, frame: pd.DataFrame) -> list:
    """The named curves that have rows in ``frame``, with their number of distinct measured points,
    most first: ``[(curve, points)]``."""
    if frame.empty:
        return []
    measured = set(frame["case_id"])
    out = [(c, sum(i in measured for i in c.case_ids)) for c in named_curves(op)]
    # most points first; among equals the base production curve, the one a reader expects
    return sorted([(c, n) for c, n in out if n],
                  key=lambda cn: (-cn[1], cn[0].variant != "base", cn[0].profile != "production", cn[0].name))


def rows_on(frame: pd.DataFrame, curve) -> pd.DataFrame:
    """The rows of ``frame`` on ``curve``, with ``x``: the value of its axis."""
    rows = frame[frame["case_id"].isin(set(curve.case_ids))]
    return rows.assign(x=rows[f"dim:{curve.axis}"])


def coverage(op, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows on no named curve: sparse coverage samples."""
    return frame[~frame["case_id"].isin(curve_ids(op))]
