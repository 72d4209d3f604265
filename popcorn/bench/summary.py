"""What a fill did: pairs by status per (op, backend), pace, and where the wall time went.

The workers report, per task, the seconds each phase took (:mod:`popcorn.bench.lane`): ``warmup``
(the first call: compiles), ``autotune`` (autotuners' benchmarks, in the shared lane), ``truth``
(inputs and the reference's fp64 and native runs), ``trials`` (the candidate's correctness runs),
``prep`` (timing's untimed side in the shared lane: warm-ups, peak memory, host time), ``capture``
(CUDA graphs, outside the lanes), ``clock`` (the device, held alone, kept busy until its clock is
up: :func:`popcorn.bench.timing.clock_up`), ``timing`` (the timed samples), ``cleanup`` (the
timing's memory given back) and ``wait`` (for a lane). The timing lane's busy fraction is the share
of wall time the device spent timing: the next bottleneck is whatever the rest of the time went to.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from popcorn.schema import STATES_APART

from .arbiter import LANE_STATES
from .record import STATUSES, Record

if TYPE_CHECKING:
    from .tasks import Task, Tasks

# worker seconds by what they went to: a task's phases (its worker's clocks; "other": the task's time outside
# them), "startup" (a worker's spawn and imports, until it takes tasks), "lost" (tasks whose worker was killed or
# died: a timeout, a crash) and "memory" (a slot waiting for device memory: its case's reservation, or the whole
# device to retry an OOM alone), "supervisor" (the fill's own work between a slot's tasks: picking a case,
# counting and writing rows); breakdown()'s "idle" is the rest (slots with no case left to take, the pipe)
PHASES = ("warmup", "autotune", "truth", "trials", "prep", "capture", "clock", "timing", "cleanup", "wait", "other",
          "memory", "supervisor", "startup", "lost")

# progress(task, row, summary) after each task taken: ``row`` is the measured Record, None when pruned
Progress = Callable[["Task", "Record | None", "Summary"], None]


class Observer:
    """Follows a fill beside its progress line (the live stream, :mod:`popcorn.bench.live`): the plan
    before the first case, each pair as the runner counts it (a :data:`Progress`), then the end. The
    pair calls come from the runner's threads while it holds its lock: an observer must not block."""

    def planned(self, tasks: Tasks, device: str, replay: list[Record]) -> None:
        """The fill's Tasks on ``device`` (its rows' device name); ``replay``: cached rows to show before
        the measured ones (a ``--slice`` fill's: the slice is drawn whole)."""

    def __call__(self, task: Task, row: Record | None, summary: Summary) -> None:
        """A pair counted: ``row`` as written to the sink, None when pruned."""

    def finished(self, summary: Summary) -> None:
        """The fill ran to its end or was drained (``summary.interrupted``)."""


@dataclass
class Summary:
    counts: dict = field(default_factory=dict)  # (op, impl) -> {status|cached|pruned|gated: n}
    totals: dict = field(default_factory=dict)  # op -> planned pairs (the progress line's denominator)
    measured: int = 0
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False
    workers: int = 1
    phases: dict = field(default_factory=dict)  # phase -> worker seconds
    by_impl: dict = field(default_factory=dict)  # backend -> {phase: worker seconds, "pairs": n}
    busy_s: float | None = None  # seconds the timing lane held the device (parallel fills)
    lanes: dict | None = None  # seconds in each lane state, and the mean shared holds (Arbiter.occupancy)
    retried_beside: int = 0  # OOMs beside other cases measured again at the end, side by side
    retried_alone: int = 0  # of those, the ones that ran out again, measured with the device to themselves
    pairs: list = field(default_factory=list)  # (op, impl, case_id, grad) of every planned pair, in plan order
    unavailable: dict = field(default_factory=dict)  # backend asked for by name -> why it cannot run here
    device: str | None = None  # the device name its rows carry (e.g. 'NVIDIA H200')
    footprints: dict = field(default_factory=dict)  # slot -> the most device bytes its idle worker held
    recycled: int = 0  # idle workers stopped for holding too much device memory
    worker_starts: dict = field(default_factory=dict)  # worker pid -> when it started (monotonic s), in start order
    timed_by: dict = field(default_factory=dict)  # (op, impl, case_id, grad) -> the pid of the worker that ran it
    canaries: list = field(default_factory=list)  # the canary_us of every timed row: the device states it timed in

    def footprint(self, slot: int, nbytes: int) -> None:
        self.footprints[slot] = max(nbytes, self.footprints.get(slot, 0))

    def spent(self, phases: dict, impl: str | None = None) -> None:
        """Add one task's phase seconds (of backend ``impl``, when named: where each backend's time goes)."""
        for k, v in phases.items():
            self.phases[k] = self.phases.get(k, 0.0) + v
        if impl is not None:
            mine = self.by_impl.setdefault(impl, {"pairs": 0})
            mine["pairs"] += 1
            for k, v in phases.items():
                mine[k] = mine.get(k, 0.0) + v

    def per_pair(self) -> dict:
        """Per backend, the worker seconds of each phase per measured pair (``pairs``: how many); a case's
        memory wait is its slot's, not one backend's."""
        return {impl: {"pairs": c["pairs"], **{k: round(c.get(k, 0.0) / c["pairs"], 3) for k in PHASES
                                               if k != "memory"}}
                for impl, c in sorted(self.by_impl.items()) if c["pairs"]}

    def breakdown(self) -> dict:
        """Wall seconds, pairs per minute, the timing lane's busy fraction and worker seconds by phase
        (PHASES, and ``idle``: slots with no case to take, the pipe)."""
        wall = time.monotonic() - self.started
        busy = self.busy_s if self.busy_s is not None else self.phases.get("timing", 0.0)
        phases = {k: self.phases.get(k, 0.0) for k in PHASES}
        phases["idle"] = max(0.0, self.workers * wall - sum(phases.values()))
        return {"wall_s": wall, "pairs_per_min": self.measured / (wall / 60) if wall > 0 else 0.0,
                "busy_s": busy, "busy_fraction": busy / wall if wall > 0 else 0.0, "workers": self.workers,
                "phases": phases, "per_pair": self.per_pair(), "lanes": self.lanes,
                "retried_beside": self.retried_beside, "retried_alone": self.retried_alone,
                "recycled": self.recycled, "idle_worker_gib": (round(statistics.median(self.footprints.values()) / 2**30, 2),
                                    round(max(self.footprints.values()) / 2**30, 2)) if self.footprints else None}

    def states(self) -> str | None:
        """The device states the fill's rows were timed in, by their canaries (:mod:`popcorn.bench.device_state`):
        the range, and how many rows lie more than STATES_APART above the fastest; None without canaries."""
        if not self.canaries:
            return None
        low = min(self.canaries)
        apart = sum(c > low * (1 + STATES_APART) for c in self.canaries)
        return (f"device state (canary us per call): {low:.3f} to {max(self.canaries):.3f}, median "
                f"{statistics.median(self.canaries):.3f}; {apart} of {len(self.canaries)} timed row(s) more than "
                f"{STATES_APART:.0%} above the fastest")

    def add(self, op: str, impl: str, what: str) -> None:
        c = self.counts.setdefault((op, impl), {})
        c[what] = c.get(what, 0) + 1
        if what in STATUSES:
            self.measured += 1

    def done(self, op: str) -> dict:
        """Pairs of ``op`` handled so far, by status or reason skipped."""
        statuses: dict = {}
        for (o, _), c in self.counts.items():
            if o == op:
                for k, v in c.items():
                    statuses[k] = statuses.get(k, 0) + v
        return statuses

    def as_dict(self) -> dict:
        """The summary as plain data (what ``bench fill --out DIR`` leaves in ``DIR/fill-summary.json``)."""
        return {"measured": self.measured, "interrupted": self.interrupted, "workers": self.workers,
                "wall_s": time.monotonic() - self.started,
                "counts": [{"op": o, "impl": i, **c} for (o, i), c in self.counts.items()],
                "pairs": [list(p) for p in self.pairs], "unavailable": dict(self.unavailable), "device": self.device}

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
        if self.measured:
            b = self.breakdown()
            total = b["workers"] * b["wall_s"]
            parts = ", ".join(f"{k} {v:.0f} s ({v / total:.0%})" for k, v in b["phases"].items())
            lines.append(f"timing lane busy {b['busy_fraction']:.0%} of the wall time; {b['workers']} worker(s) "
                         f"spent {total:.0f} s: {parts}")
            if self.lanes:
                lines.append(lane_states(self.lanes))
            if b["idle_worker_gib"]:
                lines.append("device memory an idle worker held, at most (GiB): median %.2f, max %.2f of the workers; "
                             % b["idle_worker_gib"] + f"{self.recycled} worker(s) stopped for holding too much")
            if states := self.states():
                lines.append(states)
            if self.retried_beside or self.retried_alone:
                lines.append(f"{self.retried_beside} pair(s) out of memory beside other cases retried after every "
                             f"other case, side by side; {self.retried_alone} of them then with the device to themselves")
        return "\n".join(lines)


def lane_states(lanes: dict) -> str:
    """The lanes' states as shares of their time: whether the device's lane work or the workers limit a fill."""
    total = sum(lanes[k] for k in LANE_STATES) or 1.0
    return (f"lanes: exclusive {lanes['exclusive'] / total:.0%}, shared {lanes['shared'] / total:.0%} "
            f"({lanes['mean_shared']:.1f} holds at once), handing over {lanes['handover'] / total:.0%}, "
            f"free {lanes['free'] / total:.0%}")


class ProgressLine:
    """The terminal progress: one line per op, rewritten after each measured pair, with an ETA."""

    def __init__(self, out=sys.stderr):
        self.out, self.op = out, None

    def __call__(self, task: Task, row: Record | None, summary: Summary) -> None:
        if row is None:
            return  # a pruned pair: no line, as it costs no time
        if self.op not in (None, task.op):
            print(file=self.out)
        self.op = task.op
        statuses = summary.done(task.op)
        elapsed = time.monotonic() - summary.started
        rate = summary.measured / elapsed if elapsed else 0
        done, total = sum(statuses.values()), summary.totals.get(task.op, 0)
        eta = f"{(total - done) / rate:.0f}s" if rate and summary.measured else "?"
        text = " ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
        print(f"\r{task.op}: {done}/{total} {text} ETA {eta}   ", end="", file=self.out, flush=True)

    def end(self) -> None:
        if self.op is not None:
            print(file=self.out)
