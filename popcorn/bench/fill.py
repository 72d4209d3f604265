"""``popcorn bench fill``: run the shared case plan for every installed backend, surviving crashes,
hangs and OOMs.

The supervisor (this module) plans, skips what the user cache already holds, prunes cases an
OOM/timeout frontier dominates, and feeds tasks one by one to a long-lived worker process
(:mod:`popcorn.bench.worker`). A worker death costs one ``crash`` row (from its sentinel), a
hang one watchdog budget (a ``timeout`` row, then a fresh worker), a poisoned CUDA context a
restart. Rows stream to the user cache in small batches; Ctrl-C flushes and stops.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from popcorn.core import Case
from popcorn.core.registry import REFERENCE, Op

from . import plan as planning
from . import store
from .api import device_name
from .record import OOM, STATUSES, TIMEOUT, Record
from .worker import Worker, crash_row, orphaned_sentinels, row_from  # noqa: F401 - crash_row: the fill API

REUSABLE = frozenset({"pass", "fail", "crash", "oom", "timeout", "skip"})  # error rows are measured again
REFERENCE_TIMEOUT = 60.0  # a reference that needs longer than this is an OOM-class budget, not a compile
GROWTH_S_PER_GIB = 30.0  # watchdog seconds added per GiB a case's correctness run holds
CPU_BUDGET_BYTES = 2 * 2**30  # the plan's "device memory" on CPU: keeps a CPU fill to minutes
WRITE_EVERY_S = 5.0
IDLE_DEATHS = 3  # a worker that dies between cases is replaced; this many in a row ends the fill


def device_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return CPU_BUDGET_BYTES


@dataclass
class Summary:
    counts: dict = field(default_factory=dict)  # (op, impl) -> {status|cached|pruned: n}
    measured: int = 0
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False

    def add(self, op: str, impl: str, what: str) -> None:
        c = self.counts.setdefault((op, impl), {})
        c[what] = c.get(what, 0) + 1
        if what in STATUSES:
            self.measured += 1

    def table(self) -> str:
        cols = list(STATUSES) + ["cached", "pruned", "gated"]
        width = max([len(f"{o} {i}") for o, i in self.counts] + [10])
        lines = [f"{'op backend':<{width}}  " + " ".join(f"{c:>7}" for c in cols)]
        for (o, i), c in self.counts.items():
            lines.append(f"{o + ' ' + i:<{width}}  " + " ".join(f"{c.get(k, 0):>7}" for k in cols))
        minutes = (time.monotonic() - self.started) / 60
        rate = self.measured / minutes if minutes > 0 else 0.0
        lines.append(f"{self.measured} case-backend pairs measured in {minutes * 60:.0f} s "
                     f"({rate:.1f} per minute)" + ("; interrupted" if self.interrupted else ""))
        return "\n".join(lines)


def usable(row: Record, op: Op, device: str) -> bool:
    impl = op.implementations.get(row.impl)
    return (impl is not None and row.device == device and row.torch == torch.__version__
            and row.backend_version == (impl.backend.version if impl.backend.package else None)
            and row.current(op.ref_hash, impl.impl_hash))


def backends_for(op: Op, wanted: list[str] | None, out=sys.stderr) -> list[str]:
    """The reference first, then each installed backend (filtered by ``wanted``); missing ones are named."""
    names = []
    for name, impl in op.implementations.items():
        if name == REFERENCE or (wanted and name not in wanted and name.split(":")[0] not in wanted):
            continue
        problem = impl.backend.problem()
        if problem:
            if wanted:
                print(f"{op.name}: {problem}", file=out)
            continue
        names.append(name)
    if wanted and not names and set(wanted) != {REFERENCE}:
        print(f"{op.name}: none of {', '.join(wanted)} is installed; measuring the reference only", file=out)
    return [REFERENCE] + names


def watchdog(op: Op, impl: str, planned: planning.Planned, timeout: float) -> float:
    """Seconds a case may take: ``timeout`` is the floor of backends that compile on first use, others
    get at most the reference's 60 s floor; both grow with the case's size. The reference is capped
    at 60 s: a reference that needs longer is out of budget, not compiling."""
    if impl == REFERENCE:
        return min(timeout, REFERENCE_TIMEOUT)
    grow = GROWTH_S_PER_GIB * planning.footprint(op, planned.case, planned.grad) / 2**30
    floor = timeout if op[impl].backend.compiles else min(timeout, REFERENCE_TIMEOUT)
    return floor + grow


def fill(ops: list[Op], *, backends: list[str] | None = None, limit: int | None = None, force: bool = False,
         timeout: float = 300.0, slice_spec: list[str] | None = None, trials: int = 10,
         device: str | None = None, curves: bool = False, out=sys.stderr) -> Summary:
    """Measure the plan of each op for the reference and every installed backend; returns the Summary.

    ``curves``: the named curves alone (a release fill). Pairs a static gate or forward-only flag
    excludes are counted as ``gated`` and never reach the worker."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dname = device_name(dev)
    budget = device_bytes(dev)
    summary = Summary()
    sentinel_dir = store.cache_dir().parent / "fill"
    worker: Worker | None = None
    pending: list[Record] = []
    last_write = time.monotonic()

    def flush():
        nonlocal pending, last_write
        if pending:
            store.write(pending)
            pending = []
        last_write = time.monotonic()

    pending += orphaned_sentinels(sentinel_dir)
    try:
        for op in ops:
            impls = backends_for(op, backends, out)
            if slice_spec:
                axis, context = planning.parse_slice(op, slice_spec)
                the_plan = planning.slice_cases(op, axis, context, budget)
            else:
                the_plan = planning.case_plan(op, budget)
            if curves:
                the_plan = planning.curves_only(the_plan)
            if limit:
                the_plan = planning.sample(the_plan, limit)
            cached: dict[tuple, Record] = {}
            if not force:
                bad: list = []
                for r in store.read(op.name, bad=bad):
                    if usable(r, op, dname) and r.status in REUSABLE and (r.status != "pass" or r.benchmarked):
                        cached[(r.impl, r.case_id, r.grad)] = r
                for path, line, why in bad:
                    print(f"skipped {path}:{line} ({why})", file=out)
            frontiers = {name: planning.Frontier() for name in impls}
            for (impl, _, grad), r in cached.items():
                if r.status in (OOM, TIMEOUT) and impl in frontiers:
                    planned = Case.from_config(json.loads(r.config))
                    frontiers[impl].add(planned, grad, _stratum_of(the_plan, r) or "")
            total = len(the_plan.cases) * len(impls)
            if total and not force and all((i, p.case.case_id, p.grad) in cached or planning.gated(op, op[i], p)
                                           for p in the_plan.cases for i in impls):
                print(f"{op.name}: every planned case is cached; add --force to remeasure", file=out)
            done = 0
            for p in the_plan.cases:
                ref_row = None
                for impl in impls:
                    done += 1
                    key = (impl, p.case.case_id, p.grad)
                    if key in cached:
                        summary.add(op.name, impl, "cached")
                        if impl == REFERENCE:
                            ref_row = cached[key]
                        continue
                    if planning.gated(op, op[impl], p):
                        summary.add(op.name, impl, "gated")
                        continue
                    if frontiers[REFERENCE].blocks(p.case, p.grad, p.stratum) or \
                            frontiers[impl].blocks(p.case, p.grad, p.stratum):
                        summary.add(op.name, impl, "pruned")
                        continue
                    task = {"op": op.name, "module": op.reference.__module__, "impl": impl,
                            "config": p.case.config(), "grad": p.grad, "trials": trials, "device": str(dev)}
                    budget_s = watchdog(op, impl, p, timeout)
                    row = None
                    for _ in range(IDLE_DEATHS):
                        if worker is None:
                            worker = Worker(dev, sentinel_dir)
                        try:
                            row_dict, ok = worker.run(task, budget_s)
                            if "error" in row_dict:  # raised outside the harness's own handling
                                status = OOM if row_dict.get("oom") else "error"
                                row = row_from(op, impl, p.case, p.grad, status, f"worker: {row_dict['error']}",
                                                dev)
                            else:
                                row = Record.from_dict(row_dict)
                            if not ok:  # the case left the CUDA context unusable: start afresh
                                worker.kill()
                                worker = None
                        except TimeoutError:
                            worker.kill()
                            worker = None
                            row = row_from(op, impl, p.case, p.grad, TIMEOUT, f"no result within {budget_s:.0f} s",
                                            dev)
                        except (EOFError, ConnectionError, OSError):
                            row = worker.death_row()  # None: it died before taking the task; run it afresh
                            worker = None
                        if row is not None:
                            break
                    if row is None:
                        raise RuntimeError(f"the fill worker died {IDLE_DEATHS} times before taking a task "
                                           f"({op.name} {impl} {p.case.label}); is something killing it?")
                    if impl == REFERENCE:
                        ref_row = row
                    elif ref_row is not None:
                        for k in ("fwd_ms", "bwd_ms", "step_ms", "fwd_mem_mb", "step_mem_mb"):
                            setattr(row, f"ref_{k}", getattr(ref_row, k))
                    if row.status in (OOM, TIMEOUT):
                        frontiers[impl].add(p.case, p.grad, p.stratum)
                    summary.add(op.name, impl, row.status)
                    pending.append(row)
                    if time.monotonic() - last_write > WRITE_EVERY_S:
                        flush()
                    _progress(out, op.name, done, total, summary)
            flush()
            print(file=out)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        # a second Ctrl-C (or a signal sent to the whole process group) must not cut the flush short
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            flush()
            if worker is not None:
                worker.close()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
    return summary


def _stratum_of(the_plan, row: Record) -> str | None:
    for p in the_plan.cases:
        if p.case.case_id == row.case_id and p.grad == row.grad:
            return p.stratum
    return None


def _progress(out, op: str, done: int, total: int, summary: Summary) -> None:
    statuses = {}
    for (o, _), c in summary.counts.items():
        if o == op:
            for k, v in c.items():
                statuses[k] = statuses.get(k, 0) + v
    elapsed = time.monotonic() - summary.started
    rate = summary.measured / elapsed if elapsed else 0
    remaining = total - done
    eta = f"{remaining / rate:.0f}s" if rate and summary.measured else "?"
    text = " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
    print(f"\r{op}: {done}/{total} {text} ETA {eta}   ", end="", file=out, flush=True)
