"""The support matrix (op x backend) and the report's headline counts, from a records frame.

The cells are ``popcorn bench view``'s (:func:`popcorn.bench.view.matrix_of`: the same states and
median speedups), from per-pair summaries computed column-wise. This module adds which backends
are the fastest on at least one case of an op, and lays the matrix out as text for the overview.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from popcorn.bench.view import MARKS, Matrix, Summary, matrix_of
from popcorn.schema import PASS, STATUSES


@dataclass(frozen=True)
class Support:
    matrix: Matrix
    fastest: frozenset  # (op, impl) pairs fastest (forward) on at least one current case


def summaries(frame: pd.DataFrame) -> dict:
    """(op, impl) -> view.Summary of a records frame, column-wise (a Record per row would cost seconds
    on a large report): all rows, current rows by status, median speedups of current rows."""
    if frame.empty:
        return {}
    total = frame.groupby(["op", "impl"], sort=False).size()
    current = frame[frame["current"]]
    statuses = current.groupby(["op", "impl", "status"], sort=False).size()
    medians = current.groupby(["op", "impl"], sort=False)[["speedup", "step_speedup"]].median()
    by_pair: dict = {}
    for (op, impl, status), n in statuses.items():
        by_pair.setdefault((op, impl), {})[status] = int(n)
    out = {}
    for (op, impl), n in total.items():
        sp = medians.loc[(op, impl)] if (op, impl) in medians.index else None
        out[op, impl] = Summary(int(n), by_pair.get((op, impl), {}),
                                _or_none(sp["speedup"]) if sp is not None else None,
                                _or_none(sp["step_speedup"]) if sp is not None else None)
    return out


def _or_none(v) -> float | None:
    return None if v is None or v != v else float(v)


def fastest(frame: pd.DataFrame) -> frozenset:
    """(op, impl) pairs with the lowest forward time on at least one (case, gradient mode, device),
    among current timed pass rows."""
    timed = frame[frame["current"] & (frame["status"] == PASS) & frame["fwd_ms"].notna()]
    if timed.empty:
        return frozenset()
    best = timed["fwd_ms"] == timed.groupby(["op", "case_id", "grad", "device"], sort=False)["fwd_ms"].transform("min")
    return frozenset(zip(timed["op"][best], timed["impl"][best]))


def support(frame: pd.DataFrame, ops: dict) -> Support:
    """The matrix (view.matrix_of: the cells ``popcorn bench view`` prints) and the fastest pairs."""
    return Support(matrix_of(summaries(frame), ops, len(frame)), fastest(frame))


FASTEST = "⚡"  # marks a backend fastest on at least one case of its op


def cell_text(cell, fastest: bool = False) -> str:
    """A cell's mark, then its median forward and step speedups (``✔ 2.3x / 1.8x``); ``⚡`` first
    when the backend is the fastest on some case."""
    text = (FASTEST + " " if fastest else "") + MARKS[cell.state]
    if cell.speedup is not None:
        text += f" {cell.speedup:.1f}x"
        if cell.step_speedup is not None:
            text += f" / {cell.step_speedup:.1f}x"
    return text


def table(s: Support) -> pd.DataFrame:
    """The matrix as text, one row per op (index) and one column per backend."""
    m = s.matrix
    return pd.DataFrame([[cell_text(m.cells[op, impl], (op, impl) in s.fastest) for impl in m.impls] for op in m.ops],
                        index=pd.Index(m.ops, name="op"), columns=m.impls)


def headline(frame: pd.DataFrame) -> dict:
    """Counts for the overview: rows, ops, backends, devices, current rows, and rows per status."""
    return {
        "rows": len(frame),
        "current": int(frame["current"].sum()) if len(frame) else 0,
        "ops": frame["op"].nunique(),
        "backends": frame["impl"].nunique(),
        "devices": frame["device"].nunique(),
        "statuses": {s: int(n) for s, n in frame["status"].value_counts().reindex(STATUSES).dropna().items()
                     if n},
    }
