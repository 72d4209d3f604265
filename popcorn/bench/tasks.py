"""Fill tasks: the case plan of each op, per installed backend, minus what is already measured.

:func:`plan_tasks` turns ops, backends and plan options, plus the rows a sink already holds, into
an ordered :class:`Tasks`: the (op, backend, case) pairs to measure and the pairs skipped with
why (``cached`` or ``gated``). Cached and gated are decided here; OOM/timeout frontier pruning is
decided by the runner as it takes tasks, because a frontier grows during the run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from popcorn.core.registry import Op
from popcorn.schema import REFERENCE, REUSABLE  # noqa: F401 - REUSABLE: fill's name for it; error rows are measured again

from . import plan as planning
from .api import device_name
from .record import Record
from .slice_spec import parse_slice

REFERENCE_TIMEOUT = 60.0  # a reference that needs longer than this is an OOM-class budget, not a compile
GROWTH_S_PER_GIB = 30.0  # watchdog seconds added per GiB a case's correctness run holds
CPU_BUDGET_BYTES = 2 * 2**30  # the plan's "device memory" on CPU: keeps a CPU fill to minutes

Cached = Callable[[str, list], list[Record]]  # (op name, list collecting unreadable lines) -> rows held


@dataclass(frozen=True)
class Task:
    """One (op, backend, planned case) to measure, with its watchdog budget."""

    op: str
    module: str  # the op's kernel module: the worker imports the op from there
    impl: str
    planned: planning.Planned
    budget_s: float
    trials: int
    device: str
    forward_only: bool = False  # the backend has no backward: a gradient case is measured forward only

    @property
    def case(self):
        return self.planned.case

    @property
    def grad(self) -> bool:
        """The mode measured (and the row's ``grad``): the plan's, forward only for a forward-only backend."""
        return self.planned.grad and not self.forward_only

    @property
    def stratum(self) -> str:
        return self.planned.stratum

    def message(self) -> dict:
        """What the worker process receives (plain data: it crosses a pipe and lands in a sentinel)."""
        return {"op": self.op, "module": self.module, "impl": self.impl, "config": self.case.config(),
                "grad": self.grad, "trials": self.trials, "device": self.device}


@dataclass(frozen=True)
class Skip:
    """A planned pair that is not measured: ``cached`` (``row`` holds it) or ``gated``."""

    task: Task
    why: str
    row: Record | None = None


@dataclass
class Tasks:
    """Every planned pair of a fill in plan order: a Task to measure or a Skip. The runner walks them in
    this order, so its counts and progress read as the plan is worked through."""

    steps: list[Task | Skip] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # backend asked for by name -> why it cannot run here

    @property
    def todo(self) -> list[Task]:
        return [s for s in self.steps if isinstance(s, Task)]

    @property
    def skipped(self) -> list[Skip]:
        return [s for s in self.steps if isinstance(s, Skip)]

    def __iter__(self):
        return iter(self.todo)

    def __len__(self) -> int:
        return len(self.todo)


def device_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return CPU_BUDGET_BYTES


def backends_for(op: Op, wanted: list[str] | None, out=sys.stderr, problems: dict | None = None) -> list[str]:
    """The reference first, then each installed backend (filtered by ``wanted``); missing ones are named
    (and, by implementation name, put in ``problems``)."""
    names = []
    for name, impl in op.implementations.items():
        if name == REFERENCE or (wanted and name not in wanted and name.split(":")[0] not in wanted):
            continue
        problem = impl.backend.problem()
        if problem:
            if wanted:
                print(f"{op.name}: {problem}", file=out)
                if problems is not None:
                    problems[name] = problem
            continue
        names.append(name)
    others = [w for w in wanted or () if w != REFERENCE]
    if others and not names:
        print(f"{op.name}: none of {', '.join(others)} is installed; measuring the reference only", file=out)
    return [REFERENCE] + names


def usable(row: Record, op: Op, device: str) -> bool:
    impl = op.implementations.get(row.impl)
    return (impl is not None and row.device == device and row.torch == torch.__version__
            and row.backend_version == (impl.backend.version if impl.backend.package else None)
            and row.current(op.ref_hash, impl.impl_hash))


def watchdog(op: Op, impl: str, planned: planning.Planned, timeout: float) -> float:
    """Seconds a case may take: ``timeout`` is the floor of backends that compile on first use (their
    family's ``first_call_s`` where larger), others get at most the reference's 60 s floor; both grow
    with the case's size. The reference is capped at 60 s: a reference that needs longer is out of
    budget, not compiling."""
    if impl == REFERENCE:
        return min(timeout, REFERENCE_TIMEOUT)
    grow = GROWTH_S_PER_GIB * planning.footprint(op, planned.case, planned.grad) / 2**30
    backend = op[impl].backend
    floor = max(timeout, backend.first_call_s) if backend.compiles else min(timeout, REFERENCE_TIMEOUT)
    return floor + grow


def plan_tasks(ops: list[Op], cached: Cached | None = None, *, backends: list[str] | None = None,
               limit: int | None = None, slice_spec: list[str] | None = None, curves: bool = False,
               strata: list[str] | None = None, force: bool = False, timeout: float = 300.0, trials: int = 10,
               device: str | None = None, budget: int | None = None, points: int | None = None,
               out=sys.stderr) -> Tasks:
    """The fill's Tasks: each op's plan (``slice_spec``, ``curves``, ``strata``, ``limit`` as in ``bench
    fill``) for the reference and every installed backend, in plan order. Pairs ``cached`` already holds as
    reusable rows of this device and today's code (unless ``force``) and pairs a static gate
    excludes are skipped; a forward-only backend is measured forward only on gradient cases. ``strata``: only the plan's cases of these strata (``limit``
    then samples among them); ValueError names a stratum no op could have. ``points``: each curve's smallest
    points alone (curves only). ``budget``: the device memory
    the plan fits cases to (default: the device's)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    budget = device_bytes(dev) if budget is None else budget
    _check_strata(ops, strata)
    tasks = Tasks()
    for op in ops:
        impls = backends_for(op, backends, out, tasks.unavailable)
        the_plan = _plan_of(op, budget, slice_spec, curves, limit, strata, points)
        if strata and not the_plan.cases:
            print(f"{op.name}: no planned case in {', '.join(strata)} on this device", file=out)
        held = {} if force or cached is None else _reusable(op, cached, device_name(dev), out)
        steps = []
        for p in the_plan.cases:
            for impl in impls:
                task = Task(op.name, op.reference.__module__, impl, p, watchdog(op, impl, p, timeout), trials,
                            str(dev), op[impl].forward_only)
                row = held.get((impl, p.case.case_id, task.grad))
                if row is not None:
                    steps.append(Skip(task, "cached", row))
                else:
                    steps.append(Skip(task, "gated") if planning.gated(op, op[impl], p) else task)
        if steps and not force and all(isinstance(s, Skip) for s in steps):
            print(f"{op.name}: every planned case is cached; add --force to remeasure", file=out)
        tasks.steps += steps
    return tasks


def _check_strata(ops: list[Op], strata: list[str] | None) -> None:
    known = {s for op in ops for s in planning.strata_of(op)}
    unknown = [s for s in strata or () if s not in known]
    if unknown:
        raise ValueError(f"no op named here has stratum {', '.join(map(repr, unknown))}: a stratum is "
                         "PROFILE-DTYPE-grad|fwd (PROFILE: coverage, production or long), e.g. "
                         "production-bfloat16-grad; `popcorn bench plan OP --summary` lists an op's strata")


def _plan_of(op: Op, budget: int, slice_spec, curves: bool, limit: int | None,
             strata: list[str] | None = None, points: int | None = None) -> planning.Plan:
    if slice_spec:
        axis, context = parse_slice(op, slice_spec)
        the_plan = planning.slice_cases(op, axis, context, budget)
    else:
        the_plan = planning.case_plan(op, budget)
    if curves or points:
        the_plan = planning.curves_only(the_plan, points)
    if strata:
        the_plan = planning.only_strata(the_plan, strata)
    if limit:
        the_plan = planning.sample(the_plan, limit)
    return the_plan


def _reusable(op: Op, cached: Cached, device: str, out) -> dict[tuple, Record]:
    """The rows ``cached`` holds for ``op`` that spare a measurement, by (impl, case_id, grad); unreadable
    lines are named on ``out`` and skipped."""
    held, bad = {}, []
    for r in cached(op.name, bad):
        if usable(r, op, device) and r.status in REUSABLE and (r.status != "pass" or r.benchmarked):
            held[(r.impl, r.case_id, r.grad)] = r
    for path, line, why in bad:
        print(f"skipped {path}:{line} ({why})", file=out)
    return held
