"""``popcorn bench view``: the support matrix (op x implementation) in the terminal.

Only current rows (measured against today's reference and implementation code) decide a cell:

* ``✔``  every current row passes;
* ``✔*`` some pass, the rest are gated (skip), failed or unverified (oom, timeout, error...);
* ``✘``  current rows, none passes;
* ``?``  rows, but all stale (measured against older code);
* ``·``  no rows;
* blank: the implementation is not registered for the op.

Non-reference cells add the median forward speedup over timed current pass rows
(``ref_fwd_ms / fwd_ms``), e.g. ``✔ 2.3x``.
"""

from __future__ import annotations

from pathlib import Path

import statistics
import sys

from .record import PASS, Record

REFERENCE = "torch"
EXPLORER = "streamlit run dashboards/explorer.py"
ALL, SOME, NONE, STALE, EMPTY = "✔", "✔*", "✘", "?", "·"


def columns(ops: dict) -> list[str]:
    """Implementation columns: the reference first, then every other registered name sorted."""
    names = {i for op in ops.values() for i in op.implementations}
    return ([REFERENCE] if REFERENCE in names else []) + sorted(names - {REFERENCE})


def speedup(rows: list[Record]) -> float | None:
    """Median ``ref_fwd_ms / fwd_ms`` over timed pass rows (None when none has both times)."""
    ratios = [r.ref_fwd_ms / r.fwd_ms for r in rows
              if r.status == PASS and r.fwd_ms and r.ref_fwd_ms]
    return statistics.median(ratios) if ratios else None


def cell(op, impl: str, rows: list[Record]) -> str:
    if impl not in op.implementations:
        return ""
    if not rows:
        return EMPTY
    current = [r for r in rows if r.current(op.ref_hash, op.implementations[impl].impl_hash)]
    if not current:
        return STALE
    passes = sum(1 for r in current if r.status == PASS)
    mark = ALL if passes == len(current) else SOME if passes else NONE
    if impl == REFERENCE or not passes:
        return mark
    s = speedup(current)
    return f"{mark} {s:.1f}x" if s is not None else mark


def support_matrix(records: list[Record], ops: dict) -> str:
    """The op x impl table as text (every registered op, sorted; see the module docstring)."""
    by_pair: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        by_pair.setdefault((r.op, r.impl), []).append(r)
    cols = columns(ops)
    body = [[name] + [cell(ops[name], c, by_pair.get((name, c), [])) for c in cols] for name in sorted(ops)]
    head = ["op"] + cols
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    lines = []
    for row in [head] + body:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def run_view(records: list[Record], ops: dict, out=sys.stdout) -> int:
    """Print the matrix, a legend, the row counts and how to open the explorer; 1 when there are no rows."""
    if not records:
        print("view: no records; fill and merge first (`popcorn bench fill OP`, `popcorn bench merge FILES...`)",
              file=out)
        return 1
    print(support_matrix(records, ops), file=out)
    known = [r for r in records if r.op in ops and r.impl in ops[r.op].implementations]
    current = sum(1 for r in known if r.current(ops[r.op].ref_hash, ops[r.op].implementations[r.impl].impl_hash))
    print(f"\n{ALL} all current rows pass  {SOME} some pass (rest gated/failed/unverified)  {NONE} none passes  "
          f"{STALE} only stale rows  {EMPTY} no rows; Nx: median forward speedup vs {REFERENCE}", file=out)
    unknown = len(records) - len(known)
    print(f"{len(records)} rows ({current} current"
          + (f", {unknown} of unregistered ops or implementations, not shown" if unknown else "")
          + f") over {len({r.op for r in known})} op(s)", file=out)
    # The explorer ships in the source tree (dashboards/), not the wheel: say so when it is absent.
    here = Path(__file__).resolve().parents[2] / "dashboards" / "explorer.py"
    print(f"Explorer: {EXPLORER}" + ("" if here.exists() else " (from a source checkout, once dashboards/explorer.py "
                                     "exists)"), file=out)
    return 0
