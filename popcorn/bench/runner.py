"""The fill runner: measure Tasks one by one in a supervised worker and write the rows to a sink.

:func:`run` is what the CLI, a Dagster partition and the live server share. It feeds tasks to a
long-lived worker process (:class:`popcorn.bench.worker.Worker`): a worker death costs one
``crash`` row (from its sentinel), a hang one watchdog budget (a ``timeout`` row, then a fresh
worker), a poisoned CUDA context a restart. A task an OOM/timeout frontier dominates is pruned as
it is taken, so a frontier met during the run prunes the rest of its stratum. Rows reach the sink
in small batches; Ctrl-C writes what was measured and stops.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from popcorn.schema import REFERENCE, REFERENCE_TIMED  # the reference's timings, copied as ref_* onto rows

from .frontier import Frontier
from .record import OOM, STATUSES, TIMEOUT, Record
from .sinks import Sink
from .tasks import Skip, Task, Tasks
from .worker import Worker, orphaned_sentinels, resolve_op, row_from

IDLE_DEATHS = 3  # a worker that dies between cases is replaced; this many in a row ends the fill

# progress(task, row, summary) after each task taken: ``row`` is the measured Record, None when pruned
Progress = Callable[[Task, "Record | None", "Summary"], None]


@dataclass
class Summary:
    counts: dict = field(default_factory=dict)  # (op, impl) -> {status|cached|pruned|gated: n}
    totals: dict = field(default_factory=dict)  # op -> planned pairs (the progress line's denominator)
    measured: int = 0
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False

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


def run(tasks: Tasks | Iterable[Task], sink: Sink, progress: Progress | None = None) -> Summary:
    """Measure ``tasks`` in order, writing rows to ``sink``; returns the Summary (``interrupted`` after
    Ctrl-C). The skipped pairs of a :class:`Tasks` are counted where the plan has them, and their cached
    rows seed the frontiers and the reference times. Raises RuntimeError when the worker keeps dying
    before taking a task."""
    tasks = tasks if isinstance(tasks, Tasks) else Tasks(list(tasks))
    runner = _Runner(sink, progress)
    runner.begin(tasks)
    try:
        for step in tasks.steps:
            runner.take(step)
    except KeyboardInterrupt:
        runner.summary.interrupted = True
    finally:
        runner.finish()
    return runner.summary


class _Runner:
    """The state of one run: the worker, the frontiers, the reference rows and the rows not yet written."""

    def __init__(self, sink: Sink, progress: Progress | None):
        self.sink, self.progress = sink, progress
        self.summary = Summary()
        self.worker: Worker | None = None
        self.frontiers: dict[tuple, Frontier] = {}  # (op, impl) -> exhausted points
        self.refs: dict[tuple, Record] = {}  # (op, case_id, grad) -> the reference's row
        self.pending: list[Record] = orphaned_sentinels(sink.sentinels)
        self.last_write = time.monotonic()
        self.op: str | None = None

    def begin(self, tasks: Tasks) -> None:
        """Totals for the progress line; every cached row is known before the first task is taken."""
        for step in tasks.steps:
            task = step.task if isinstance(step, Skip) else step
            self.summary.totals[task.op] = self.summary.totals.get(task.op, 0) + 1
            if isinstance(step, Skip) and step.row is not None:
                self.learn(task, step.row)

    def learn(self, task: Task, row: Record) -> None:
        """Remember a row's reference times and exhausted budget for the tasks still to come."""
        if task.impl == REFERENCE:
            self.refs[(task.op, task.case.case_id, task.grad)] = row
        if row.status in (OOM, TIMEOUT):
            self.frontier(task.op, task.impl).add(task.case, task.grad, task.stratum)

    def frontier(self, op: str, impl: str) -> Frontier:
        return self.frontiers.setdefault((op, impl), Frontier())

    def pruned(self, task: Task) -> bool:
        """Whether the reference's or this backend's frontier dominates the task's case."""
        return any(self.frontier(task.op, impl).blocks(task.case, task.grad, task.stratum)
                   for impl in (REFERENCE, task.impl))

    def take(self, step: Task | Skip) -> None:
        if isinstance(step, Skip):  # counted where the plan has it, as the progress line reads
            self.summary.add(step.task.op, step.task.impl, step.why)
            return
        if step.op != self.op:  # an op's rows are written when its last case is done
            self.flush()
            self.op = step.op
        row = None
        if self.pruned(step):
            self.summary.add(step.op, step.impl, "pruned")
        else:
            row = self.keep(step, self.measure(step))
        if self.progress is not None:
            self.progress(step, row, self.summary)

    def keep(self, task: Task, row: Record) -> Record:
        """Complete a measured row with the reference's times on its case, learn from it, count it and
        queue it for the sink."""
        ref = self.refs.get((task.op, task.case.case_id, task.grad))
        if task.impl != REFERENCE and ref is not None:
            for k in REFERENCE_TIMED:
                setattr(row, f"ref_{k}", getattr(ref, k))
        self.learn(task, row)
        self.summary.add(task.op, task.impl, row.status)
        self.pending.append(row)
        if time.monotonic() - self.last_write > self.sink.write_every_s:
            self.flush()
        return row

    def measure(self, task: Task) -> Record:
        """The task's row; a worker that dies before taking the task is replaced, IDLE_DEATHS times."""
        for _ in range(IDLE_DEATHS):
            row = self.attempt(task)
            if row is not None:
                return row
        raise RuntimeError(f"the fill worker died {IDLE_DEATHS} times before taking a task "
                           f"({task.op} {task.impl} {task.case.label}); is something killing it?")

    def attempt(self, task: Task) -> Record | None:
        """One try in the current worker (started if needed); None when it died without the task."""
        if self.worker is not None and self.worker.device != task.device:
            self.stop_worker()
        if self.worker is None:
            self.worker = Worker(torch.device(task.device), self.sink.sentinels)
        try:
            row_dict, ok = self.worker.run(task.message(), task.budget_s)
        except TimeoutError:
            self.worker.kill()
            self.worker = None
            return self.failed(task, TIMEOUT, f"no result within {task.budget_s:.0f} s")
        except (EOFError, ConnectionError, OSError):
            row, self.worker = self.worker.death_row(), None
            return row
        if not ok:  # the case left the CUDA context unusable: start afresh
            self.worker.kill()
            self.worker = None
        if "error" in row_dict:  # raised outside the harness's own handling
            return self.failed(task, OOM if row_dict.get("oom") else "error", f"worker: {row_dict['error']}")
        return Record.from_dict(row_dict)

    def failed(self, task: Task, status: str, reason: str) -> Record:
        op = resolve_op(task.message())
        return row_from(op, task.impl, task.case, task.grad, status, reason, torch.device(task.device))

    def flush(self) -> None:
        if self.pending:
            self.sink.write(self.pending)
            self.pending = []
        self.last_write = time.monotonic()

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def finish(self) -> None:
        # a second Ctrl-C (or a signal sent to the whole process group) must not cut the flush short
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self.flush()
            self.stop_worker()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
