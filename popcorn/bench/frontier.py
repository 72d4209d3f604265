"""The budget frontier of a fill: cases an OOM or timeout already showed to be out of reach.

A fill adds each exhausted case and skips later cases that dominate one (the plan orders cases
smallest-first within each stratum, so the frontier meets its boundary before paying beyond it).
"""

from __future__ import annotations

import json

from popcorn.core.case import Case


class Frontier:
    """Minimal exhausted (OOM or timeout) points; a candidate at least as large in every dim and
    batch entry as one of them, with identical dtype, args, present set, batch rank and dim names,
    in the same (grad, stratum), is blocked. Crashes are never added (the caller decides)."""

    def __init__(self):
        self._points: dict[tuple, list[tuple[int, ...]]] = {}

    @staticmethod
    def _key(case: Case, grad: bool, stratum: str) -> tuple:
        return (bool(grad), stratum, case.dtype, json.dumps(sorted(case.args.items()), default=repr),
                tuple(sorted(case.present)), len(case.batch), tuple(sorted(case.dims)))

    @staticmethod
    def _vector(case: Case) -> tuple[int, ...]:
        return tuple(case.dims[n] for n in sorted(case.dims)) + tuple(case.batch)

    def add(self, case: Case, grad: bool, stratum: str, order: int = -1) -> None:
        """``order``: the exhausted task's place in the plan (a parallel fill finishes tasks out of plan
        order; -1: known before the fill began, e.g. a cached row)."""
        points = self._points.setdefault(self._key(case, grad, stratum), [])
        vec = self._vector(case)
        if any(o <= order and all(a <= b for a, b in zip(p, vec)) for p, o in points):
            return  # already dominated by an earlier point: not minimal
        points[:] = [(p, o) for p, o in points if not (order <= o and all(a <= b for a, b in zip(vec, p)))]
        points.append((vec, order))

    def blocks(self, case: Case, grad: bool, stratum: str, before: int | None = None) -> bool:
        """Whether an exhausted point the case dominates exists (``before``: only points earlier in the
        plan than this, so a fill working in parallel prunes exactly what a serial one would)."""
        points = self._points.get(self._key(case, grad, stratum), ())
        vec = self._vector(case)
        return any((before is None or o < before) and all(a <= b for a, b in zip(p, vec)) for p, o in points)

    def __len__(self) -> int:
        return sum(len(p) for p in self._points.values())
