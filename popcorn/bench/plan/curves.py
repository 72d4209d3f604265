"""The plan itself: coverage rows and one-axis curves, deduplicated, fitted to the device and ordered."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from popcorn.core.case import Case
from popcorn.schema import MIN_CURVE_POINTS

from .axes import BATCH, anchor, axis_values, dim_axes, dtypes_of, primary_axis, temporal
from .cases import HEADROOM, Planned, build, estimated_bytes, footprint, repair, slug, stratum, stratum_key, \
    wants_grad
from .covering import coverage_rows


@dataclass(frozen=True)
class Curve:
    """A one-axis series: ``axis`` varies over ``case_ids`` (ascending), everything else is fixed.

    ``fixed_dims`` holds every other dim, ``batch`` the fixed variadic batch (``()`` on the
    ``...`` axis, where the batch is what varies), ``args`` every scalar, ``present`` the optional
    tensors passed. ``variant`` is ``base``, ``arg-<name>-<value>`` or ``present-<name>``.
    """

    name: str
    profile: str
    axis: str
    dtype: str
    variant: str
    fixed_dims: dict
    batch: tuple
    args: dict
    present: tuple
    case_ids: tuple[str, ...]


@dataclass
class Plan:
    op: str
    cases: list[Planned] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    dropped: int = 0  # distinct cases dropped because their correctness copies cannot fit


class Collector:
    """Deduplicates by (case_id, grad), first seen wins; counts distinct unfit cases."""

    def __init__(self, op, device_bytes: int):
        self.op, self.device_bytes = op, device_bytes
        self.planned: dict[tuple[str, bool], Planned] = {}
        self.bytes: dict[str, int] = {}
        self.unfit: set[str] = set()

    def admit(self, case: Case, profile: str, series: str) -> bool:
        """Plan ``case`` (already repaired) unless it cannot fit; True when it is (or was) planned."""
        grad = wants_grad(self.op, case)
        cid = case.case_id
        key = (cid, grad)
        if key in self.planned:
            return True
        if cid not in self.bytes:
            self.bytes[cid] = estimated_bytes(self.op, case)
        if footprint(self.op, case, grad, self.bytes[cid]) > self.device_bytes * HEADROOM:
            self.unfit.add(cid)
            return False
        self.planned[key] = Planned(case, grad, stratum(profile, case.dtype, grad), series)
        return True

    def plan(self, curves: list[Curve]) -> Plan:
        cases = sorted(self.planned.values(),
                       key=lambda p: (stratum_key(p.stratum), self.bytes[p.case.case_id], p.case.case_id))
        return Plan(self.op.name, cases, curves, len(self.unfit))


def _variants(op, axis: str) -> list[tuple[str, dict, tuple]]:
    defaults = {n: values[0] for n, values in op.arg_pools.items()}
    out = [("base", defaults, ())]
    if axis == primary_axis(op):
        for n, values in op.arg_pools.items():
            for v in values[1:]:
                out.append((f"arg-{slug(n)}-{slug(v)}", {**defaults, n: v}, ()))
        out += [(f"present-{slug(n)}", defaults, (n,)) for n in op.optional]
    return out


def sweep(op, axis: str, values, fixed: dict, dtype: str, args: dict, present: tuple,
          collector: Collector, profile: str, series: str) -> list[Case]:
    """Repaired, fitting cases of the sweep, ascending; points whose repair moves a fixed value are dropped."""
    cases: dict[str, Case] = {}
    for v in values:
        raw = build(op, {**fixed, axis: v}, dtype, args, present)
        case = repair(op, raw)
        if case is not raw:
            pinned = [k for k in raw.dims if k != axis]
            if any(case.dims[k] != raw.dims[k] for k in pinned) or case.args != raw.args:
                continue
        if case.case_id in cases or not collector.admit(case, profile, series):
            continue
        cases[case.case_id] = case
    return sorted(cases.values(), key=lambda c: (c.batch if axis == BATCH else c.dims[axis], c.case_id))


def curve(name, profile, axis, dtype, variant, cases, args, present) -> Curve:
    first = cases[0]
    fixed = {k: v for k, v in sorted(first.dims.items()) if k != axis}
    return Curve(name, profile, axis, dtype, variant, fixed, () if axis == BATCH else first.batch, dict(args),
                 tuple(present), tuple(c.case_id for c in cases))


def _curves(op, profile: str, collector: Collector) -> list[Curve]:
    axes = dim_axes(op)
    swept = axes if profile == "production" else [a for a in axes if temporal(op, a)]
    curves = []
    for dtype in dtypes_of(op):
        for axis in swept:
            fixed = {a: anchor(op, a, profile) for a in axes if a != axis}
            for variant, args, present in _variants(op, axis):
                name = f"curve:{profile}:{axis}:{dtype}:{variant}"
                # Admit to a trial collector first: a curve that fails the >= 2 rule plans nothing.
                trial = Collector(op, collector.device_bytes)
                cases = sweep(op, axis, axis_values(op, axis, profile), fixed, dtype, args, present, trial,
                              profile, name)
                collector.unfit |= trial.unfit
                if len(cases) < 2:
                    continue
                for c in cases:
                    collector.admit(c, profile, name)
                curves.append(curve(name, profile, axis, dtype, variant, cases, args, present))
    return curves


def case_plan(op, device_bytes: int) -> Plan:
    """Coverage, then production curves, then long-context curves; deduplicated, fitted, ordered."""
    collector = Collector(op, device_bytes)
    for row in coverage_rows(op):
        dims = {a: row[a] for a in dim_axes(op)}
        present = tuple(n for n in op.optional if row[f"+{n}"])
        case = repair(op, build(op, dims, row["dtype"], {n: row[n] for n in op.arg_pools}, present))
        collector.admit(case, "coverage", "coverage")
    curves = _curves(op, "production", collector) + _curves(op, "long", collector)
    return collector.plan(curves)


def sample(plan: Plan, limit: int) -> Plan:
    """``limit`` planned cases, in plan order: each curve's first MIN_CURVE_POINTS points (its smallest),
    curve by curve, then a deterministic random sample (random.Random(0)) of the rest, so a limited fill
    still draws every curve it has room for and a release check can pass on it.

    Curves keep only their sampled case_ids; curves with none left are omitted.
    """
    if limit is None or limit >= len(plan.cases):
        return Plan(plan.op, list(plan.cases), list(plan.curves), plan.dropped)
    first = {}
    for i, p in enumerate(plan.cases):
        first.setdefault(p.case.case_id, i)
    keep: dict[int, None] = {}
    for c in plan.curves:
        points = [first[cid] for cid in c.case_ids[:MIN_CURVE_POINTS] if cid in first]
        if len(keep) + len(set(points) - set(keep)) > limit:
            break
        keep.update(dict.fromkeys(points))
    rest = [i for i in range(len(plan.cases)) if i not in keep]
    keep.update(dict.fromkeys(random.Random(0).sample(rest, max(0, limit - len(keep)))))
    return _keeping(plan, [plan.cases[i] for i in sorted(keep)])


def only_strata(plan: Plan, strata) -> Plan:
    """The planned cases of ``strata`` alone, in plan order (what ``--stratum`` selects); curves keep only
    those cases and are omitted when none is left."""
    return _keeping(plan, [p for p in plan.cases if p.stratum in set(strata)])


def _keeping(plan: Plan, cases: list[Planned]) -> Plan:
    ids = {p.case.case_id for p in cases}
    curves = []
    for c in plan.curves:
        kept = tuple(i for i in c.case_ids if i in ids)
        if kept:
            curves.append(replace(c, case_ids=kept))
    return Plan(plan.op, cases, curves, plan.dropped)


def curves_only(plan: Plan, points: int | None = None) -> Plan:
    """The cases on named curves alone (what a release fill runs; coverage is sampled elsewhere).
    ``points``: each curve's ``points`` smallest alone (MIN_CURVE_POINTS is what a release check needs: the
    cheapest fill that can pass it)."""
    curves = [replace(c, case_ids=c.case_ids[:points]) for c in plan.curves] if points else list(plan.curves)
    ids = {i for c in curves for i in c.case_ids}
    return Plan(plan.op, [p for p in plan.cases if p.case.case_id in ids], curves, plan.dropped)
