"""``popcorn bench view``: the support matrix (op x implementation).

:func:`matrix` returns the data from Records, :func:`matrix_of` from per-pair summaries (the explorer
summarizes a large report column-wise and builds the same cells there); :func:`format_view` turns it
into the terminal text. Only current rows (measured against today's reference and
implementation code) decide a cell's state:

* ``all``   (``✔``):  every current row passes;
* ``some``  (``✔*``): some pass, the rest are gated (skip), failed or unverified (oom, timeout, error...);
* ``none``  (``✘``):  current rows, none passes;
* ``stale`` (``?``):  rows, but all stale (measured against older code);
* ``empty`` (``·``):  no rows;
* ``unregistered`` (blank): the implementation is not registered for the op.

Non-reference cells carry the median forward speedup over timed current pass rows
(``ref_fwd_ms / fwd_ms``), shown e.g. ``✔ 2.3x``, and the median step (forward + backward) speedup
(``ref_step_ms / step_ms``), which the explorer shows beside it.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from popcorn.schema import PASS, REFERENCE, is_current, is_current_for

from .record import Record

EXPLORER = "streamlit run dashboards/app.py"
ALL, SOME, NONE, STALE, EMPTY, UNREGISTERED = "all", "some", "none", "stale", "empty", "unregistered"
MARKS = {ALL: "✔", SOME: "✔*", NONE: "✘", STALE: "?", EMPTY: "·", UNREGISTERED: ""}


@dataclass(frozen=True)
class Cell:
    """What the rows of one (op, impl) pair say."""

    state: str  # one of ALL, SOME, NONE, STALE, EMPTY, UNREGISTERED
    rows: int = 0
    current: int = 0
    statuses: dict = field(default_factory=dict)  # current rows by status
    speedup: float | None = None  # median forward speedup over the reference; None for the reference itself
    step_speedup: float | None = None  # the same for forward + backward, over gradient-mode rows with step times


@dataclass(frozen=True)
class Matrix:
    """Every registered op (sorted) x every implementation name (:func:`columns`), plus row counts."""

    ops: list[str]
    impls: list[str]
    cells: dict  # (op, impl) -> Cell
    rows: int  # every record given
    current: int  # records of registered pairs measured against today's code
    unregistered: int  # records of ops or implementations not registered (not in the matrix)
    ops_with_rows: int


def columns(ops: dict) -> list[str]:
    """Implementation columns: the reference first, then every other registered name sorted."""
    names = {i for op in ops.values() for i in op.implementations}
    return ([REFERENCE] if REFERENCE in names else []) + sorted(names - {REFERENCE})


def speedup(rows: list[Record], timing: str = "fwd") -> float | None:
    """Median ``ref_<timing>_ms / <timing>_ms`` over timed pass rows (None when none has both times);
    ``timing`` is ``fwd`` or ``step``."""
    ours, ref = f"{timing}_ms", f"ref_{timing}_ms"
    ratios = [getattr(r, ref) / getattr(r, ours) for r in rows
              if r.status == PASS and getattr(r, ours) and getattr(r, ref)]
    return statistics.median(ratios) if ratios else None


def current(records: list[Record], ops: dict, device: str | None = None) -> list[Record]:
    """Rows of registered pairs measured against today's code (what decides a cell), of ``device`` when given."""
    return [r for r in records if r.op in ops and is_current_for(r, ops[r.op]) and device in (None, r.device)]


def published_path() -> Path | None:
    """The Parquet snapshot of the published report dispatch loads (``$POPCORN_REPORT``, else the
    bundled one): the version ``CURRENT`` names; None when nothing was published there yet. The
    dispatch table beside it is not parsed (on a large report that costs seconds)."""
    from popcorn.core.settings import settings
    from popcorn.dispatch.table import BUNDLED

    current = Path(settings().report_dir or BUNDLED) / "CURRENT"
    if not current.exists():
        return None
    return current.parent / f"report-v{current.read_text().strip()}.parquet"


def published_table():
    """The published report as an Arrow table of the canonical schema; None when nothing was
    published yet (:func:`published_path`)."""
    import pyarrow.parquet as pq

    path = published_path()
    if path is None:
        return None
    if not path.exists():
        raise FileNotFoundError(f"{path.parent / 'CURRENT'} names {path.name}, which is missing; republish "
                                "with `popcorn bench publish`")
    from .record import conform

    return conform(pq.read_table(path))


def published() -> list[Record]:
    """The rows of :func:`published_table`; none when nothing was published there yet."""
    from .record import from_arrow

    table = published_table()
    return [] if table is None else from_arrow(table)


@dataclass(frozen=True)
class Summary:
    """What decides one (op, impl) cell, however the rows were read: how many rows, the current ones
    by status, and the median speedups over current timed pass rows (:func:`speedup`)."""

    rows: int
    statuses: dict  # current rows by status
    speedup: float | None = None
    step_speedup: float | None = None


def summarize(op, impl: str, rows: list[Record]) -> Summary:
    """The :class:`Summary` of one pair's rows (rows of a registered implementation)."""
    ref_hash, impl_hash = op.ref_hash, op.implementations[impl].impl_hash
    current = [r for r in rows if is_current(r, ref_hash, impl_hash)]
    statuses: dict[str, int] = {}
    for r in current:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return Summary(len(rows), statuses, speedup(current), speedup(current, "step"))


def cell_of(op, impl: str, s: Summary | None) -> Cell:
    """A cell's state from its summary (None: no rows); see the module docstring."""
    if impl not in op.implementations:
        return Cell(UNREGISTERED)
    if s is None or not s.rows:
        return Cell(EMPTY)
    current = sum(s.statuses.values())
    passes = s.statuses.get(PASS, 0)
    state = STALE if not current else ALL if passes == current else SOME if passes else NONE
    timed = impl != REFERENCE and passes
    return Cell(state, s.rows, current, dict(s.statuses), s.speedup if timed else None,
                s.step_speedup if timed else None)


def cell(op, impl: str, rows: list[Record]) -> Cell:
    if impl not in op.implementations:
        return Cell(UNREGISTERED)
    return cell_of(op, impl, summarize(op, impl, rows) if rows else None)


def matrix_of(summaries: dict, ops: dict, rows: int) -> Matrix:
    """The matrix from per-pair summaries (``(op, impl) -> Summary``; pairs of unregistered ops or
    implementations are counted, not shown) of ``rows`` records in all. The explorer summarizes a
    large frame column-wise and comes here, as :func:`matrix` does from Records."""
    cols = columns(ops)
    cells = {(name, c): cell_of(ops[name], c, summaries.get((name, c))) for name in sorted(ops) for c in cols}
    # every row of a registered pair lands in its cell: the counts add up from the cells
    known = sum(c.rows for c in cells.values())
    return Matrix(sorted(ops), cols, cells, rows, sum(c.current for c in cells.values()), rows - known,
                  len({name for (name, _), c in cells.items() if c.rows}))


def matrix(records: list[Record], ops: dict) -> Matrix:
    """The support matrix of ``records`` over the registered ``ops``; see the module docstring."""
    by_pair: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        by_pair.setdefault((r.op, r.impl), []).append(r)
    summaries = {(o, i): summarize(ops[o], i, rows) for (o, i), rows in by_pair.items()
                 if o in ops and i in ops[o].implementations}
    return matrix_of(summaries, ops, len(records))


# -- text ----------------------------------------------------------------------------------------

def format_cell(c: Cell) -> str:
    mark = MARKS[c.state]
    return f"{mark} {c.speedup:.1f}x" if c.speedup is not None else mark


def format_matrix(m: Matrix) -> str:
    """The op x impl table, columns padded to their widest value."""
    body = [[name] + [format_cell(m.cells[name, c]) for c in m.impls] for name in m.ops]
    head = ["op"] + m.impls
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in [head] + body)


def support_matrix(records: list[Record], ops: dict) -> str:
    """The op x impl table as text (every registered op, sorted; see the module docstring)."""
    return format_matrix(matrix(records, ops))


def format_view(m: Matrix) -> str:
    """The matrix, a legend, the row counts and how to open the explorer."""
    lines = [format_matrix(m), "",
             f"{MARKS[ALL]} all current rows pass  {MARKS[SOME]} some pass (rest gated/failed/unverified)  "
             f"{MARKS[NONE]} none passes  {MARKS[STALE]} only stale rows  {MARKS[EMPTY]} no rows; "
             f"Nx: median forward speedup vs {REFERENCE}",
             f"{m.rows} rows ({m.current} current"
             + (f", {m.unregistered} of unregistered ops or implementations, not shown" if m.unregistered else "")
             + f") over {m.ops_with_rows} op(s)"]
    # The explorer ships in the source tree (dashboards/), not the wheel: say so when it is absent.
    here = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
    lines.append(f"Explorer: {EXPLORER}" + ("" if here.exists() else " (from a source checkout)"))
    return "\n".join(lines)


def run_view(records: list[Record], ops: dict, out=sys.stdout) -> int:
    """Print :func:`format_view` of the records; 1 when there are none."""
    if not records:
        print("view: no records; fill and merge first (`popcorn bench fill OP`, `popcorn bench merge FILES...`)",
              file=out)
        return 1
    print(format_view(matrix(records, ops)), file=out)
    return 0
