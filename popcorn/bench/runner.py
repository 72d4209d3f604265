"""The fill runner: measure Tasks in supervised workers and write the rows to a sink.

:func:`run` is what the CLI, a Dagster partition and the live server share. It feeds tasks to
long-lived worker processes (:class:`popcorn.bench.worker.Worker`), one per slot, a case's backends
to one worker: a worker death costs one ``crash`` row (from its sentinel), a hang one watchdog
budget (a ``timeout`` row, then a fresh worker), a poisoned CUDA context a restart. With several
slots, cases are measured side by side while timing keeps the device alone
(:mod:`popcorn.bench.arbiter`). A task an OOM/timeout frontier dominates is pruned as it is taken,
so a frontier met during the run prunes the rest of its stratum; a row measured beside an earlier
case that could still run out waits for it, so parallel slots prune exactly what one slot would.
Rows reach the sink in small batches; Ctrl-C writes what was measured and stops.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterable

import torch

from popcorn.core.settings import shared_holds
from popcorn.schema import FORWARD_TIMED, REFERENCE, REFERENCE_TIMED  # the reference's timings, copied as ref_* onto rows

from . import device_lane
from . import plan as planning
from .arbiter import Arbiter, Closed
from .frontier import Frontier
from .record import OOM, TIMEOUT, Record
from .sinks import Sink
from .summary import Progress, Summary
from .tasks import Skip, Task, Tasks
from .worker import TRUTH_CACHE_BYTES, Worker, orphaned_sentinels, resolve_op, row_from

IDLE_DEATHS = 3  # a worker that dies between cases is replaced; this many in a row ends the fill
# device memory a worker holds besides its case: CUDA context, compiled modules, allocator slack (1.5-2.8 GiB
# measured per worker between small cases on an H100, run 10)
CONTEXT_BYTES = 2 * 2**30
# an idle worker holding more than this and more than its even share of the cases' memory is stopped (a fresh one
# takes the next case): memory held outside the allocator, which empty_cache cannot give back, grew to 7 GiB
# (median) and 18 GiB (max) per worker in a 12-worker fill on an H100 (run 13), from 0.7 GiB at start
# (benchmarks/worker_memory.py)
RECYCLE_BYTES = 2 * CONTEXT_BYTES
STALL_S = 120.0  # no row counted for this long: say on stderr what each slot waits for (a sweep's stall)

def run(tasks: Tasks | Iterable[Task], sink: Sink, progress: Progress | None = None, workers: int = 1) -> Summary:
    """Measure ``tasks``, writing rows to ``sink``; returns the Summary (``interrupted`` after Ctrl-C).

    A case's backends go to one worker in plan order, so they share its inputs and reference trials.
    ``workers`` > 1 measures that many cases side by side (:mod:`popcorn.bench.arbiter` keeps timing
    alone on the device and shares out its memory); rows, frontiers and pruning are those of one
    worker. The skipped pairs of a :class:`Tasks` are counted up front and their cached rows seed the
    frontiers and the reference times. Raises RuntimeError when a worker keeps dying before taking a
    task."""
    tasks = tasks if isinstance(tasks, Tasks) else Tasks(list(tasks))
    runner = _Runner(sink, progress, max(1, workers), tasks)
    with interrupt_once(signal.SIGINT) as fired:  # a second Ctrl-C (or one sent to the process group)
        try:
            runner.go()
        except KeyboardInterrupt:
            runner.summary.interrupted = True
        finally:
            fired.append("draining")  # nor may a first one that comes now
            runner.finish()
    if runner.error is not None and not runner.summary.interrupted:
        raise runner.error
    return runner.summary


@contextmanager
def interrupt_once(signum: int):
    """While held, the first ``signum`` raises KeyboardInterrupt in the main thread and later ones are
    ignored, so the drain it starts (stop at the case in flight, write every finished row) runs to its
    end. Off the main thread it does nothing."""
    fired: list = []  # the holder may append to silence the signal from then on
    if threading.current_thread() is not threading.main_thread():
        yield fired
        return

    def interrupt(sig, frame):
        if not fired:
            fired.append(sig)
            raise KeyboardInterrupt(f"signal {sig}")

    previous = signal.signal(signum, interrupt)
    try:
        yield fired
    finally:
        signal.signal(signum, previous)


class _Runner:
    """The state of one run: its slots (one worker each), the frontiers, the reference rows, the rows
    waiting for earlier tasks that could prune them, and the rows not yet written."""

    def __init__(self, sink: Sink, progress: Progress | None, workers: int, tasks: Tasks):
        self.sink, self.progress = sink, progress
        self.summary = Summary(workers=workers)
        self.lock = threading.RLock()
        self.frontiers: dict[tuple, Frontier] = {}  # (op, impl) -> exhausted points
        self.refs: dict[tuple, Record] = {}  # (op, case_id, grad) -> the reference's row
        self.pending: list[Record] = orphaned_sentinels(sink.sentinels)
        self.last_write = self.last_count = time.monotonic()
        self.unfinished: dict[int, Task] = {}  # plan order -> task of a group taken, not yet counted
        self.held: dict[int, tuple[Task, Record]] = {}  # rows an unfinished earlier task could still prune
        self.deferred: list[tuple[int, Task]] = []  # OOMs beside other cases, retried alone once the rest ran
        self.left: dict[str, int] = {}  # op -> tasks not yet counted (an op's rows are written when it ends)
        self.groups = self.begin(tasks)
        self.needs: dict[int, int] = {}  # a group's first plan order -> the device bytes it reserves
        self.stop = threading.Event()
        self.error: BaseException | None = None
        memory, ledger = _device_memory(tasks, workers)
        # a serial fill arbitrates too where other fills may share its device: its cases go in the ledger
        self.arbiter = Arbiter(memory, ledger, shared_holds()) if workers > 1 or ledger is not None else None
        self.slots = [Slot(self, i) for i in range(workers)]
        self.threads: list[threading.Thread] = []

    def begin(self, tasks: Tasks) -> list[list[tuple[int, Task]]]:
        """Count the skipped pairs, learn their cached rows, and group the tasks by case, in plan order."""
        groups: dict[tuple, list] = {}
        for order, step in enumerate(tasks.steps):
            task = step.task if isinstance(step, Skip) else step
            self.summary.totals[task.op] = self.summary.totals.get(task.op, 0) + 1
            if isinstance(step, Skip):
                self.summary.add(task.op, task.impl, step.why)
                if step.row is not None:
                    self.learn(task, step.row, -1)
                    if task.impl == REFERENCE:  # a reusable reference row times the case's backends
                        self.refs[(task.op, task.case.case_id, task.grad)] = step.row
            else:
                groups.setdefault(_case_of(task), []).append((order, task))
                self.left[task.op] = self.left.get(task.op, 0) + 1
        return list(groups.values())

    def go(self) -> None:
        threading.Thread(target=self.watch_stalls, name="fill-stalls", daemon=True).start()
        self.run_slots()
        if self.deferred and not self.stop.is_set() and self.error is None:
            # the OOMs beside other cases go again side by side first, each with its memory reserved: most ran
            # out of what others held, and a retry alone drains the device and stops every worker (run 13, H100:
            # eleven at once, retried alone one by one for 260 s); one that runs out again is retried alone
            again, self.deferred = sorted(self.deferred, key=lambda d: d[0]), []
            self.summary.retried_beside = len(again)
            groups: dict[tuple, list] = {}
            for order, task in again:
                groups.setdefault(_case_of(task), []).append((order, task))
            with self.lock:
                self.groups = list(groups.values())
            self.run_slots()
        self.retry_deferred()

    def run_slots(self) -> None:
        """Every slot takes case groups until none is left (the main thread's, for one slot)."""
        if len(self.slots) == 1:
            self.slots[0].loop()
            return
        self.threads = [threading.Thread(target=slot.loop, name=f"fill-slot-{slot.index}", daemon=True)
                        for slot in self.slots]
        for t in self.threads:
            t.start()
        for t in self.threads:
            while t.is_alive():
                t.join(0.2)  # wakes for Ctrl-C

    def defer(self, order: int, task: Task) -> None:
        """``task`` ran out of memory beside other cases: it is retried after every other case (side by side
        with the other such tasks, then alone if it runs out again), not now. Retried alone at once, it
        drained the device: every slot waited for the cases in flight, then for it (run 11: 1 to 3 such
        retries, 813-1,052 worker-seconds of a 12-worker, 170 s fill). Until then it counts as unfinished,
        so the rows it could prune wait for it, as a serial fill would have them."""
        with self.lock:
            self.deferred.append((order, task))

    def retry_deferred(self) -> None:
        """Measure the deferred OOMs in plan order, each with the device to itself (:meth:`Slot.retry_alone`);
        one whose case an earlier real OOM dominates is pruned instead."""
        slot = self.slots[0]
        for order, task in sorted(self.deferred, key=lambda d: d[0]):
            if self.stop.is_set() or self.error is not None:
                return
            with self.lock:
                pruned = self.pruned(order, task)
            row = None if pruned else slot.retry_alone(task, last=True)
            self.done(order, task, row)
        self.deferred = []

    def watch_stalls(self) -> None:
        """While the run goes, report every STALL_S without a counted row what each slot is doing and what
        the device's lanes and memory hold: a fill that stops writing rows says why (run 8's sweep did not)."""
        reported = time.monotonic()
        while not self.stop.wait(1.0):
            now = time.monotonic()
            if now - self.last_count >= STALL_S and now - reported >= STALL_S:
                reported = now
                print(self.stall_report(now), file=sys.stderr, flush=True)

    def stall_report(self, now: float) -> str:
        lines = [f"\nfill: no row for {now - self.last_count:.0f} s; the slots:"]
        for slot in self.slots:
            doing, since = slot.doing or ("idle", now)
            lines.append(f"  slot {slot.index}: {doing} (for {now - since:.0f} s)")
        if self.arbiter is not None:
            lines.append(f"  {self.arbiter.describe()}")
        return "\n".join(lines)

    def next_group(self) -> list[tuple[int, Task]] | None:
        with self.lock:
            if self.stop.is_set() or not self.groups:
                return None
            group = self.groups.pop(self.pick())
            self.unfinished.update(group)
            return group

    def need(self, group: list[tuple[int, Task]]) -> int:
        """The device bytes ``group`` reserves (its first task's :func:`reservation`), worked out once."""
        order, first = group[0]
        if order not in self.needs:
            self.needs[order] = reservation(first)
        return self.needs[order]

    def pick(self) -> int:
        """Which group a free slot takes (an index into ``self.groups``): the first in plan order, but with
        several slots on arbitrated memory a case larger than a slot's share of it is passed over until it
        fits in the memory free now or no smaller case is left. Taken in plan order, each such case drained
        every slot while it waited for its memory and then ran nearly alone (run 9: 897 of 1,812
        worker-seconds idle). Rows stay those of plan order: :meth:`could_prune` counts the passed-over
        cases as earlier tasks still to come."""
        arbiter = self.arbiter
        if arbiter is None or arbiter.memory is None or len(self.slots) < 2:
            return 0
        # a generator: a group's need is worked out only when the groups before it do not fit
        return first_fit((min(self.need(g), arbiter.memory) for g in self.groups),
                         arbiter.free(), arbiter.memory // len(self.slots))

    def learn(self, task: Task, row: Record, order: int) -> None:
        """Remember a row's exhausted budget for the tasks still to come."""
        if row.status in (OOM, TIMEOUT):
            self.frontier(task.op, task.impl).add(task.case, task.grad, task.stratum, order)

    def frontier(self, op: str, impl: str) -> Frontier:
        return self.frontiers.setdefault((op, impl), Frontier())

    def pruned(self, order: int, task: Task) -> bool:
        """Whether an exhausted point earlier in the plan, of the reference or this backend, dominates the
        task's case."""
        return any(self.frontier(task.op, impl).blocks(task.case, task.grad, task.stratum, before=order)
                   for impl in (REFERENCE, task.impl))

    def earlier(self, order: int):
        """(order, task) of every task before ``order`` in the plan not yet counted: taken, or passed over."""
        yield from self.unfinished.items()
        for group in self.groups:  # in plan order
            if group[0][0] > order:
                return
            yield from group

    def could_prune(self, order: int, task: Task) -> bool:
        """Whether an earlier task not yet counted could still prune ``task`` (were it to run out)."""
        for o, t in self.earlier(order):
            if o < order and t.op == task.op and t.impl in (REFERENCE, task.impl):
                probe = Frontier()
                probe.add(t.case, t.grad, t.stratum)
                if probe.blocks(task.case, task.grad, task.stratum):
                    return True
        return False

    def done(self, order: int, task: Task, row: Record | None) -> None:
        """A slot finished ``task`` (``row`` None: pruned when taken). Its row is counted now, or held
        until every earlier task that could prune it is counted, as a serial fill would have it."""
        with self.lock:
            if self.stop.is_set() and row is None:
                return
            if row is not None and task.impl == REFERENCE:
                self.refs[(task.op, task.case.case_id, task.grad)] = row
            if row is not None and self.could_prune(order, task) and not self.stop.is_set():
                self.held[order] = (task, row)
                return
            self.count(order, task, row)
            for o in sorted(self.held):
                if o in self.held and not self.could_prune(o, self.held[o][0]):
                    self.count(o, *self.held.pop(o))

    def count(self, order: int, task: Task, row: Record | None) -> None:
        self.last_count = time.monotonic()
        self.unfinished.pop(order, None)
        self.left[task.op] -= 1
        if row is not None and self.pruned(order, task):
            row = None  # measured beside an earlier case that ran out: pruned, as a serial fill prunes it
        if row is None:
            self.summary.add(task.op, task.impl, "pruned")
        else:
            ref = self.refs.get((task.op, task.case.case_id, task.planned.grad))
            if task.impl != REFERENCE and ref is not None:
                for k in REFERENCE_TIMED if task.grad else FORWARD_TIMED:
                    setattr(row, f"ref_{k}", getattr(ref, k))
            self.learn(task, row, order)
            self.summary.add(task.op, task.impl, row.status)
            if row.canary_us:
                self.summary.canaries.append(row.canary_us)
            self.pending.append(row)
        if self.progress is not None:
            self.progress(task, row, self.summary)
        if not self.left[task.op] or time.monotonic() - self.last_write > self.sink.write_every_s:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if self.pending:
                self.sink.write(self.pending)
                self.pending = []
            self.last_write = time.monotonic()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            self.error = self.error or error
            self.stop.set()

    def finish(self) -> None:
        interrupted = self.summary.interrupted or self.stop.is_set()
        self.stop.set()
        if self.arbiter is not None:
            self.arbiter.close()
        for slot in self.slots:
            slot.stop_worker(kill=interrupted)
        for t in self.threads:  # a slot still taking its worker's last words adds no row after the flush
            t.join(30)
        with self.lock:  # rows measured beside a task that never finished are evidence all the same
            for o in sorted(self.held):
                task, row = self.held.pop(o)
                self.count(o, task, row)
        self.flush()
        if self.arbiter is not None:
            self.summary.busy_s = self.arbiter.busy()
            self.summary.lanes = self.arbiter.occupancy()


def _device_memory(tasks: Tasks, workers: int) -> tuple:
    """(bytes, ledger): the device memory parallel cases may reserve (the device's, less room for each
    worker's context and allocator) and the ledger of other fills' reservations on the device (None:
    not shared); (None, None) on CPU, whose memory is not arbitrated."""
    devices = {t.device for t in tasks.todo}
    if len(devices) != 1 or not devices.pop().startswith("cuda") or not torch.cuda.is_available():
        return None, None
    device = torch.device(tasks.todo[0].device)
    total = torch.cuda.get_device_properties(device).total_memory
    return int(total * 0.9) - workers * CONTEXT_BYTES, device_lane.memory_for(device)


class Slot:
    """One worker of a run and the case groups it measures, one after another."""

    def __init__(self, runner: _Runner, index: int):
        self.runner, self.index = runner, index
        self.worker: Worker | None = None
        self.doing: tuple[str, float] | None = None  # what the slot does now, since when (a stall report's)

    def now_doing(self, what: str | None) -> None:
        self.doing = None if what is None else (what, time.monotonic())

    def loop(self) -> None:
        runner = self.runner
        try:
            while (group := self.supervised(runner.next_group)) is not None:
                self.measure_group(group)
        except Closed:
            return  # the fill is stopping
        except BaseException as e:  # noqa: BLE001 - the main thread re-raises it after stopping the others
            if threading.current_thread() is threading.main_thread():
                raise
            runner.fail(e)

    def measure_group(self, group: list[tuple[int, Task]]) -> None:
        runner, arbiter = self.runner, self.runner.arbiter
        if arbiter is not None:
            first = group[0][1]
            need = runner.need(group)
            self.now_doing(f"waiting for {need / 2**30:.2f} GiB of device memory ({first.op} {first.case.label})")
            self.reserve(need)
        kept = False  # the worker keeps this case's memory: a task not marked last was measured
        try:
            for order, task in group:
                if runner.stop.is_set():
                    return
                with runner.lock:
                    pruned = runner.pruned(order, task)
                last = order == group[-1][0]
                row = None if pruned else self.measure(task, last=last)
                if row is not None:
                    kept = not last
                if row is not None and row.status == OOM and arbiter is not None and self.beside_others():
                    runner.defer(order, task)  # other cases or workers may have taken its memory
                    continue
                self.supervised(runner.done, order, task, row)
        finally:
            self.now_doing(None)
            if arbiter is not None:
                if kept:  # the group's last task was pruned: the memory goes back before others are lent it
                    self.release_case()
                arbiter.unreserve(self.index)

    def supervised(self, call, *args):
        """``call(*args)``, its seconds counted as ``supervisor``: the fill's own work between a slot's tasks (picking
        a case, counting and writing rows), which waits for the runner's lock that every slot shares."""
        t0 = time.monotonic()
        try:
            return call(*args)
        finally:
            self.runner.summary.spent({"supervisor": time.monotonic() - t0})

    def beside_others(self) -> bool:
        """Whether other cases or other workers hold device memory: an OOM now need not be the case's own (run 13,
        H100: with no other case reserved, idle workers held 7 GiB each and 27 small cases ran out of memory)."""
        return self.runner.arbiter.others_reserved(self.index) or any(
            s.worker is not None for s in self.runner.slots if s is not self)

    def retry_alone(self, task: Task, last: bool) -> Record:
        """Measure ``task`` again, out of memory beside other cases, with the device to itself: the whole
        device reserved, then every worker of the fill stopped (the others are idle, as no other case
        holds memory) and the task run in a fresh one. The runner calls it once every other case ran
        (:meth:`_Runner.retry_deferred`). Idle workers keep their context, compiled modules
        and allocator leftovers: on the H100 of run 10, 1.5-2.8 GiB each, 11 of them a third of the device,
        and cases of 1.5 GiB ran out of memory again when retried beside them. An OOM now is the case's
        own, and its row says it ran alone (it prunes the larger cases of its stratum)."""
        self.runner.summary.retried_alone += 1
        self.now_doing(f"waiting for the whole device to retry an OOM alone ({task.op} {task.impl} {task.case.label})")
        self.reserve(0, solo=True)
        for slot in self.runner.slots:
            slot.stop_worker()
        try:
            row = self.measure(task, last=last)
        finally:
            self.runner.arbiter.unreserve(self.index)
        if row.status == OOM:
            row.reason = f"{row.reason} [retried alone: the only worker on the device]"
        return row

    def reserve(self, nbytes: int, solo: bool = False) -> None:
        t0 = time.monotonic()
        try:
            self.runner.arbiter.reserve(self.index, nbytes, solo=solo)
        finally:
            self.runner.summary.spent({"memory": time.monotonic() - t0})

    def release_case(self) -> None:
        worker = self.worker
        if worker is None or self.runner.stop.is_set():
            return
        try:
            worker.release_case()
        except (TimeoutError, EOFError, ConnectionError, OSError):
            self.stop_worker(kill=True)  # a worker that cannot give the memory back gives it back by exiting
            return
        self.idle(worker)

    def idle(self, worker: Worker) -> None:
        """``worker`` gave its case back: what it still holds on the device beyond CONTEXT_BYTES is memory
        no case of the fill may reserve until it says otherwise; past RECYCLE_BYTES, twice what it held fresh (a
        device whose context alone is that large) and its even share of the cases' memory, the worker is stopped
        instead. Below its share, the memory is cheaper kept than a fresh worker's start and warm-ups (run 15, an
        H100: 12 of 12 workers stopped at 4.3-4.8 GiB idle, 256 worker-seconds of starts; an H200's share for 12
        workers is about 8 GiB)."""
        if worker.footprint is None:
            return
        self.runner.summary.footprint(self.index, worker.footprint)
        arbiter, slots = self.runner.arbiter, len(self.runner.slots)
        share = (arbiter.memory or 0) // slots if arbiter is not None else 0
        if worker.footprint > max(RECYCLE_BYTES, 2 * (worker.fresh_footprint or 0), share) and slots > 1:
            self.runner.summary.recycled += 1
            self.stop_worker()  # its memory goes with it; the next case starts a fresh worker
        elif arbiter is not None:
            arbiter.beyond(self.index, max(0, worker.footprint - CONTEXT_BYTES))

    def measure(self, task: Task, last: bool = False) -> Record:
        """The task's row; a worker that dies before taking the task is replaced, IDLE_DEATHS times.
        ``last``: the case's last backend (its worker then gives the case's memory back)."""
        for _ in range(IDLE_DEATHS):
            row = self.attempt(task, last)
            if row is not None:
                return row
        raise RuntimeError(f"the fill worker died {IDLE_DEATHS} times before taking a task "
                           f"({task.op} {task.impl} {task.case.label}); is something killing it?")

    def attempt(self, task: Task, last: bool = False) -> Record | None:
        """One try in the slot's worker (started if needed); None when it died without the task. Raises
        Closed when the fill stops meanwhile: whatever the killed worker was doing is not a row."""
        runner = self.runner
        if self.worker is not None and self.worker.device != task.device:
            self.stop_worker()
        if self.worker is None:
            workers = len(runner.slots)
            threads = max(1, (os.cpu_count() or 2) // workers) if workers > 1 else None
            self.worker = Worker(torch.device(task.device), runner.sink.sentinels, self.index, runner.arbiter,
                                 threads)
            runner.summary.spent({"startup": self.worker.startup_s})
            runner.summary.worker_starts[self.worker.proc.pid] = time.monotonic()
        worker = self.worker  # the main thread may take self.worker away when the fill stops
        self.now_doing(f"{task.op} {task.impl} {task.case.label}{' grad' if task.grad else ''} in worker "
                       f"{worker.proc.pid} (watchdog {task.budget_s:.0f} s; lane waits for other fills not counted)")
        t0 = time.monotonic()
        try:
            row_dict, ok, phases = worker.run({**task.message(), "last": last}, task.budget_s)
        except TimeoutError:
            if runner.stop.is_set():
                raise Closed("the fill is stopping") from None
            self.stop_worker(kill=True)
            runner.summary.spent({"lost": time.monotonic() - t0}, task.impl)  # its phase clocks died with it
            return self.failed(task, TIMEOUT, f"no result within {task.budget_s:.0f} s")
        except (EOFError, ConnectionError, OSError):
            if runner.stop.is_set():
                raise Closed("the fill is stopping") from None
            self.worker = None
            row = worker.death_row()
            if row is not None:
                runner.summary.spent({"lost": time.monotonic() - t0}, task.impl)
            return row
        runner.summary.spent(phases, task.impl)
        runner.summary.timed_by[(task.op, task.impl, task.case.case_id, task.grad)] = worker.proc.pid
        if last:
            self.idle(worker)
        if not ok:  # the case left the CUDA context unusable: start afresh (it answered: no lane held)
            self.stop_worker(kill=True, answered=True)
        if "error" in row_dict:  # raised outside the harness's own handling
            return self.failed(task, OOM if row_dict.get("oom") else "error", f"worker: {row_dict['error']}")
        return Record.from_dict(row_dict)

    def failed(self, task: Task, status: str, reason: str) -> Record:
        op = resolve_op(task.message())
        return row_from(op, task.impl, task.case, task.grad, status, reason, torch.device(task.device))

    def stop_worker(self, kill: bool = False, answered: bool = False) -> None:
        """Close the slot's worker, or ``kill`` it; a killed worker that ``answered`` its last message (so holds
        no lane) is torn down in a shared hold, never beside a timing."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.kill(in_shared_hold=answered) if kill else worker.close()
            if self.runner.arbiter is not None:  # its memory went with it; a fresh worker holds its context
                self.runner.arbiter.beyond(self.index, 0)


def _case_of(task: Task) -> tuple:
    """The group a task goes to one worker in: its case, in the plan's mode (a forward-only backend's forward
    run shares its case's inputs and worker)."""
    return task.op, task.case.case_id, task.planned.grad, task.device


def first_fit(needs: Iterable[int], free: int, share: int) -> int:
    """The index of the first of ``needs`` (bytes, in plan order) within ``share`` or ``free``; 0 when none
    is: every case left is large and none fits now, so the first waits for its memory."""
    for i, need in enumerate(needs):
        if need <= share or need <= free:
            return i
    return 0


def reservation(task: Task) -> int:
    """Device bytes a case group may hold: its correctness run plus the reference trials its worker keeps."""
    op = resolve_op(task.message())
    need = planning.footprint(op, task.case, task.grad)
    return need * 3 // 2 + min(task.trials * need, TRUTH_CACHE_BYTES["cuda"])  # 1.5x: allocator slack
