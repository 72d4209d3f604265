"""``popcorn bench plan``: the cases a fill would run, by stratum, and the pairs gated at plan time."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from . import plan as planning


@dataclass
class PlanSummary:
    """An op's plan as data: cases per stratum, curves, and per backend the pairs static gates exclude."""

    op: str
    device_bytes: int
    strata: dict[str, list[planning.Planned]] = field(default_factory=dict)
    curves: list[planning.Curve] = field(default_factory=list)
    dropped: int = 0
    gated: dict[str, int] = field(default_factory=dict)  # backend -> pairs excluded at plan time
    footprint: dict[tuple[str, bool], int] = field(default_factory=dict)  # (case_id, grad) -> bytes

    @property
    def case_count(self) -> int:
        return sum(len(ps) for ps in self.strata.values())

    def pairs(self, backends: int) -> int:
        """Case-backend pairs a fill of the plan would measure with ``backends`` backends installed (all the op
        registers), less those static gates exclude."""
        return self.case_count * backends - sum(self.gated.values())


def summarize(op, device_bytes: int, *, curves: bool = False, strata: list[str] | None = None,
              points: int | None = None) -> PlanSummary:
    the_plan = planning.case_plan(op, device_bytes)
    if curves or points:  # as a fill's plan: `bench fill --points` implies the curves
        the_plan = planning.curves_only(the_plan, points)
    if strata:
        the_plan = planning.only_strata(the_plan, strata)
    out = PlanSummary(op.name, device_bytes, curves=the_plan.curves, dropped=the_plan.dropped)
    for p in the_plan.cases:
        out.strata.setdefault(p.stratum, []).append(p)
        out.footprint[(p.case.case_id, p.grad)] = planning.footprint(op, p.case, p.grad)
    for name, impl in op.implementations.items():
        out.gated[name] = sum(1 for ps in out.strata.values() for p in ps if planning.gated(op, impl, p))
    return out


def format_plan(s: PlanSummary, cases: bool = True) -> str:
    lines = [f"{s.op}: {s.case_count} planned cases in {len(s.strata)} strata, {len(s.curves)} curves; "
             f"{s.dropped} cases dropped (their correctness run cannot fit {s.device_bytes / 2**30:.0f} GiB)"]
    for stratum, ps in s.strata.items():
        size = {p.case.case_id: s.footprint[(p.case.case_id, p.grad)] for p in ps}
        largest = max(ps, key=lambda p: size[p.case.case_id])
        lines.append(f"  {stratum}: {len(ps)} cases, largest {largest.case.label} "
                     f"({size[largest.case.case_id] / 2**30:.2f} GiB)")
        if cases:
            lines += [f"    {p.case.case_id}  {p.case.label}  [{p.series}]" for p in ps]
    for c in s.curves:
        lines.append(f"  {c.name}: {len(c.case_ids)} points")
    gated = ", ".join(f"{name} {n}" for name, n in s.gated.items())
    lines.append(f"  gated at plan time (pairs, per backend): {gated}")
    return "\n".join(lines)


def run_plan(ops, *, memory_gib: float | None = None, curves: bool = False, strata: list[str] | None = None,
             cases: bool = True, points: int | None = None, out=sys.stdout) -> int:
    if memory_gib is None:
        import torch

        from .fill import device_bytes

        device_bytes_ = device_bytes(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    else:
        device_bytes_ = int(memory_gib * 2**30)
    total_cases = total_pairs = 0
    for op in ops:
        s = summarize(op, device_bytes_, curves=curves, strata=strata, points=points)
        print(format_plan(s, cases), file=out)
        total_cases += s.case_count
        total_pairs += s.pairs(len(op.implementations))
    if len(ops) > 1:
        print(f"{len(ops)} ops: {total_cases} planned cases, {total_pairs} case-backend pairs with every registered "
              f"backend installed, less those gated at plan time", file=out)
    return 0
