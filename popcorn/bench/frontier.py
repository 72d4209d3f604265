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

    def add(self, case: Case, grad: bool, stratum: str) -> None:
        points = self._points.setdefault(self._key(case, grad, stratum), [])
        vec = self._vector(case)
        if any(all(a <= b for a, b in zip(p, vec)) for p in points):
            return  # already dominated: not minimal
        points[:] = [p for p in points if not all(a <= b for a, b in zip(vec, p))] + [vec]

    def blocks(self, case: Case, grad: bool, stratum: str) -> bool:
        points = self._points.get(self._key(case, grad, stratum), ())
        vec = self._vector(case)
        return any(all(a <= b for a, b in zip(p, vec)) for p in points)

    def __len__(self) -> int:
        return sum(len(p) for p in self._points.values())
