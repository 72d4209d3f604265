"""``case_plan``: the plan the sweep's case partitions come from, per ``op.stratum`` key."""

import dagster as dg

from popcorn.bench import plan as planning
from popcorn.kernels import OPS

from ..partitions import case_keys, case_key, families, plan_memory
from ..resources import SweepSettings


@dg.asset(group_name="sweep")
def case_plan(context: dg.AssetExecutionContext, sweep: SweepSettings) -> dg.Output:
    """Planned cases per case partition (``op.stratum``) on the device the keys are planned for; a
    partition's fill plans the same cases for its own device (a smaller one drops what cannot fit)."""
    options = sweep.options(context)
    cases: dict[str, int] = {}
    lines = ["| op | strata | cases | curves | backends |", "|---|---|---|---|---|"]
    for name in sorted(OPS):
        the_plan = planning.case_plan(OPS[name], plan_memory())
        if options["curves_only"]:
            the_plan = planning.curves_only(the_plan)
        per = {}
        for p in the_plan.cases:
            per[case_key(name, p.stratum)] = per.get(case_key(name, p.stratum), 0) + 1
        if options["limit"]:
            per = {k: min(n, options["limit"]) for k, n in per.items()}
        cases.update(per)
        lines.append(f"| {name} | {len(per)} | {sum(per.values())} | {len(the_plan.curves)} | "
                     f"{', '.join(families(OPS[name]))} |")
    return dg.Output(cases, metadata={
        "partitions": len(case_keys()), "cases": sum(cases.values()), "ops": len(OPS),
        "device_memory_gib": round(plan_memory() / 2**30, 1), "plan": dg.MetadataValue.md("\n".join(lines))})
