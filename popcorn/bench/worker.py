"""The fill worker: a long-lived process that measures one (op, backend, case) task at a time.

It stays alive across cases so imports, CUDA initialisation and compiled kernels are paid once.
Before each case it writes a sentinel naming the task; if the process dies mid-case the
supervisor turns the sentinel into a ``crash`` row for that case only. After each case it
probes the device: a poisoned CUDA context (illegal address, device assert) asks for a restart.

:class:`Worker` is the supervisor's handle on one such process (:mod:`popcorn.bench.runner`
drives it); :func:`serve` and :func:`measure_task` run inside it.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import torch

from popcorn.core import Case
from popcorn.core.inputs import make_inputs

from popcorn.schema import REFERENCE

from . import device_lane, lane, timing
from .arbiter import Closed
from .api import _record, run_case
from .compare import Result, Truth, describe, free_memory, is_oom, reference_trial
from .record import CRASH, ERROR, OOM, SENTINEL_REASON, SKIP, Record
from .timing import Step


def resolve_op(task: dict):
    """The Op a task names: attribute ``op`` of module ``module`` (the op's own kernel module)."""
    return getattr(importlib.import_module(task["module"]), task["op"])


def probe(device: torch.device) -> bool:
    """True when the device still runs work (False: the context is poisoned)."""
    if device.type != "cuda":
        return True
    try:
        return torch.zeros(1, device=device).add_(1).item() == 1.0
    except Exception:  # noqa: BLE001
        return False


TERM_GRACE_S = 30.0  # a worker told to terminate leaves by itself after this, if its supervisor has not killed it

TRUTH_CACHE_BYTES = {"cuda": 2**30, "cpu": 256 * 2**20}  # reference trials one worker keeps for a case


class CaseCache:
    """The case being measured: its first inputs and the reference's side of each trial, kept while
    consecutive tasks measure the same case (the runner sends a case's backends to one worker), so
    inputs, fp64 truth and the native budget are computed once per case, not once per backend."""

    def __init__(self):
        self.key, self.inputs, self.truths, self.nbytes = None, None, {}, 0

    def enter(self, key) -> None:
        if key != self.key or key is None:
            had = self.key is not None
            self.key, self.inputs, self.truths, self.nbytes = key, None, {}, 0
            if had:
                free_memory()

    def truth(self, key: tuple, compute) -> Truth:
        """The reference's side of trial ``key`` = (trial, frozen inputs, gradient mode)."""
        got = self.truths.get(key)
        if got is None:
            got = compute()
            size = got.nbytes()
            limit = TRUTH_CACHE_BYTES["cuda" if torch.cuda.is_available() else "cpu"]
            if self.nbytes + size <= limit:  # larger cases compute their reference per backend, as before
                self.truths[key], self.nbytes = got, self.nbytes + size
        return got


_CACHE = CaseCache()


def measure_task(task: dict, device: torch.device) -> dict:
    """Run one task: {"op", "module", "impl", "config", "grad", "trials"} -> a Record dict."""
    op = resolve_op(task)
    impl = op[task["impl"]]
    case = Case.from_config(task["config"])
    grad = task["grad"]
    _CACHE.enter((op.name, case.case_id, str(device)))

    def draw(trial: int) -> dict:
        if trial == 0:
            if _CACHE.inputs is None:
                _CACHE.inputs = make_inputs(op, case, seed=0, device=device)
            return _CACHE.inputs
        return make_inputs(op, case, seed=trial, device=device)

    def truths(trial: int):
        return _CACHE.truth((trial, impl.no_grad, grad),
                            lambda: reference_trial(op.reference, draw, trial, grad, impl.no_grad))

    try:
        with lane.phase("truth"):
            reason = impl.rejects(draw(0), grad)
    except Exception as e:  # noqa: BLE001 - inputs that cannot be made are the harness's problem
        result = Result(OOM if is_oom(e) else ERROR, f"inputs: {describe(e)}", grad=grad)
        return _record(op, impl, case, result, device, {}).to_dict()
    if reason:
        result = Result(SKIP, reason, grad=grad)
    else:
        if impl.name != REFERENCE:
            lane.guard_backend(impl.backend.name)
            warm_up(impl, draw(0), grad)
        result = run_case(op, impl, case, draw, grad, device, trials=task["trials"], timing=True, truths=truths)
    if task.get("last"):  # the case's memory goes back before the supervisor lends it to another case
        _CACHE.enter(None)
    return _record(op, impl, case, result, device, {}).to_dict()


def warm_up(impl, inputs: dict, grad: bool) -> None:
    """One step before the trials, outside the device lanes: compiling (inductor, a Triton JIT) is host
    work that must not hold up another worker's timing (autotuners' benchmarks alone take the shared
    lane: :func:`lane.guard_autotuning`). Its errors are the trials' to find and report."""
    with lane.phase("warmup"):
        try:
            step = Step(lambda **a: impl.invoke(a), inputs, grad)
            step.step() if grad else step.forward()
        except Exception:  # noqa: BLE001
            free_memory()


def _leave_later(signum, frame) -> None:
    """SIGTERM, like Ctrl-C, is the supervisor's to act on: a Slurm walltime or ``scancel`` signals every
    process of the job at once, and a worker dying of it mid-case would leave a false ``crash`` row.
    The supervisor drains and kills its workers; should it never do so (it died first), the worker
    leaves by itself after TERM_GRACE_S."""
    timer = threading.Timer(TERM_GRACE_S, os._exit, (128 + signum,))
    timer.daemon = True
    timer.start()


def footprint(device: torch.device) -> int | None:
    """Device bytes this process holds now (its CUDA context, loaded modules, the allocator's cache and
    whatever it keeps): NVML's count for the process, else the allocator's reserve. None off CUDA. A fill
    counts an idle worker's against the memory its cases may reserve (run 13: idle workers held 4-6 GiB
    each on an H100, twice what was allowed for, and eleven cases ran out of memory at once)."""
    if device.type != "cuda":
        return None
    used = timing.process_bytes(device, os.getpid())
    return used if used is not None else torch.cuda.memory_reserved(device)


def serve(conn, sentinel: str, device: str, lanes: bool = False, compile_threads: int | None = None,
          shared_lanes: bool = False) -> None:
    """Worker loop: receive tasks on ``conn`` until None; reply (record dict, device_ok, phase seconds, the
    device bytes the process then holds: :func:`footprint`).
    ``lanes``: hold the device's lanes through the supervisor (a parallel fill); ``shared_lanes``: and
    across processes (other fills on the device), the supervisor told when each is held."""
    if lanes or shared_lanes:  # before any thread starts: they inherit the cores left to them
        lane.keep_a_core_for_timing()
    if compile_threads:  # workers compiling side by side share the host's cores
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads)
        torch.set_num_threads(compile_threads)
        torch.ones(1 << 20).sum()  # the intra-op threads start now, off the timing core (made in a timing, on it)
    # a library's autotuned kernel (fla's) benchmarks its configs once per key on this machine, not once
    # per worker process: Triton keeps the timings beside its compiled kernels (set 0 to tune in each)
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")
    # FlashAttention 4 compiles each kernel configuration once per process unless its on-disk cache is on
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's: it stops and kills workers
    signal.signal(signal.SIGTERM, _leave_later)
    dev = torch.device(device)
    # each distinct warning once per worker: inductor repeats its own on every compile and would
    # bury the progress bar
    warnings.simplefilter("once")
    import popcorn.kernels  # noqa: F401 - pay the imports before the first case's watchdog starts

    if lanes or shared_lanes:
        lane.connect(conn, device_lane.for_device(dev) if shared_lanes else None)
        if dev.type == "cuda":
            lane.guard_autotuning()
    with lane.hold(lane.SHARED):  # the CUDA context opens here: device work, never beside another worker's timing
        probe(dev)
    try:
        conn.send(("ready", os.getpid(), footprint(dev)))
    except (BrokenPipeError, EOFError):  # the fill ended (Ctrl-C) while this worker was starting
        return
    path = Path(sentinel)
    while True:
        task = conn.recv()
        if task is None:
            break
        if task.get("release"):  # the case's group ended before a task marked last (pruned): give its memory back
            held = _CACHE.key is not None
            _CACHE.enter(None)
            conn.send(("released", held, footprint(dev)))
            continue
        t0 = time.perf_counter()
        path.write_text(json.dumps(task))
        lane.take_clock()
        try:
            row = measure_task(task, dev)
        except BaseException as e:  # noqa: BLE001 - report, never die silently
            row = {"error": describe(e), "oom": is_oom(e)}
        ok = probe(dev)
        path.unlink(missing_ok=True)
        used = footprint(dev)
        conn.send((row, ok, lane.other(time.perf_counter() - t0), used))


# -- the supervisor's side -------------------------------------------------------------------------

class Worker:
    """One supervised worker process and its pipe. ``slot`` and ``arbiter``: the worker of a parallel
    fill, whose lane requests the arbiter answers for that slot."""

    def __init__(self, device: torch.device, sentinel_dir: Path, slot: int = 0, arbiter=None,
                 compile_threads: int | None = None):
        ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        self.device, self.slot, self.arbiter = str(device), slot, arbiter
        self.shared_lanes = device_lane.lane_dir(torch.device(device)) is not None
        self.conn, child = ctx.Pipe()
        sentinel_dir.mkdir(parents=True, exist_ok=True)
        self.sentinel = sentinel_dir / f"sentinel-{os.getpid()}-{time.monotonic_ns()}.json"
        self.proc = ctx.Process(target=serve, args=(child, str(self.sentinel), self.device, arbiter is not None,
                                                    compile_threads, self.shared_lanes), daemon=True)
        t0 = time.monotonic()
        self.proc.start()
        child.close()
        try:
            ready = self._reply(600)  # its context opens in a shared hold, asked for meanwhile
        except TimeoutError:
            ready = None
        except BaseException:  # it died starting (EOFError), or the fill stops while it waits for the lane
            self.kill()
            raise
        if not (isinstance(ready, tuple) and ready[0] == "ready"):
            self.kill()
            raise RuntimeError("the fill worker did not start within 600 s")
        self.startup_s = time.monotonic() - t0  # spawn, imports, the lane, CUDA context: what a fresh worker costs
        self.fresh_footprint: int | None = ready[2]  # device bytes the process held before its first task
        self.footprint: int | None = None  # device bytes the process held after its last task or release

    def run(self, task: dict, timeout: float):
        """(record dict, device ok, phase seconds) or raises TimeoutError / EOFError (worker died).
        Time spent waiting for a lane, this fill's or another's on the device, is not the task's: the
        watchdog pauses meanwhile."""
        self.conn.send(task)
        row, ok, phases, self.footprint = self._reply(timeout)
        return row, ok, phases

    def _reply(self, timeout: float):
        """The worker's next message other than a lane request, answering those meanwhile; the waits for
        a lane do not count against ``timeout``. Raises TimeoutError / EOFError (the worker died)."""
        left = timeout
        while True:
            t0 = time.monotonic()
            if not self.conn.poll(max(left, 0)):
                raise TimeoutError
            message = self.conn.recv()
            left -= time.monotonic() - t0
            if not (isinstance(message, tuple) and message and message[0] == "lane"):
                return message
            if message[1] == lane.RELEASE:
                if self.arbiter is not None:
                    self.arbiter.release(self.slot)
                continue
            if self.arbiter is not None:
                self.arbiter.acquire(self.slot, message[1])
            self.conn.send("go")
            if self.shared_lanes:  # another fill may hold the device: that wait is not the task's
                held = self.conn.recv()
                if held != ("lane", lane.HELD):
                    raise EOFError(f"the worker broke the lane protocol: {held!r}")
                if self.arbiter is not None:
                    self.arbiter.started(self.slot)

    def release_case(self, timeout: float = 60.0) -> bool:
        """Have the worker give back the memory of the case it keeps (inputs, truths, the allocator's cache),
        as a task marked ``last`` does; whether it kept one. Raises TimeoutError / EOFError as :meth:`run`."""
        self.conn.send({"release": True})
        if not self.conn.poll(timeout):
            raise TimeoutError
        message = self.conn.recv()
        if not (isinstance(message, tuple) and message and message[0] == "released"):
            raise EOFError(f"the worker broke the release protocol: {message!r}")
        self.footprint = message[2]
        return message[1]

    def death_row(self) -> Record | None:
        """The crash row for the case named by the dead worker's sentinel; None when it died between
        cases (killed while idle): that costs no row, only a fresh worker."""
        self.proc.join(5)
        code = self.proc.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        task = json.loads(self.sentinel.read_text()) if self.sentinel.exists() else None
        self.kill()
        return None if task is None else crash_row(task, f"worker died ({how}) during the case")

    def kill(self, in_shared_hold: bool = False) -> None:
        """Stop the process now. ``in_shared_hold``: first wait for a shared hold of its slot, so that its
        context's teardown (device work) never runs beside another worker's timing. Only for a worker that
        answered and holds no lane: a hung one may itself wait for a lane, which that hold would wait behind."""
        if in_shared_hold:
            self._hold_shared()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        self.sentinel.unlink(missing_ok=True)
        if self.arbiter is not None:
            self.arbiter.drop(self.slot)

    def close(self) -> None:
        """Let the worker leave; in a parallel fill in a shared hold of its slot (its context is torn down:
        device work, never beside another worker's timing), which :meth:`kill` drops."""
        self._hold_shared()
        try:
            self.conn.send(None)
            self.proc.join(10)
        except (BrokenPipeError, OSError):
            pass
        self.kill()

    def _hold_shared(self) -> None:
        """A shared hold for the slot, which :meth:`kill` drops with the rest of its lanes."""
        if self.arbiter is not None:
            try:
                self.arbiter.acquire(self.slot, lane.SHARED)
            except Closed:  # the fill is stopping: nothing is timed any more
                pass


def row_from(op, impl: str, case: Case, grad: bool, status: str, reason: str, device: torch.device) -> Record:
    """A row the harness never produced (crash, timeout, a worker error): status and reason alone."""
    return _record(op, op[impl], case, Result(status, reason, grad=grad), device, {})


def crash_row(task: dict, reason: str) -> Record:
    op = resolve_op(task)
    case = Case.from_config(task["config"])
    device = torch.device(task.get("device", "cuda" if torch.cuda.is_available() else "cpu"))
    return row_from(op, task["impl"], case, task["grad"], CRASH, reason, device)


def orphaned_sentinels(sentinel_dir: Path) -> list[Record]:
    """Crash rows for sentinels left by fills whose supervisor died too (e.g. the machine was killed)."""
    rows = []
    for path in sorted(sentinel_dir.glob("sentinel-*.json")) if sentinel_dir.exists() else ():
        pid = int(path.name.split("-")[1])
        try:
            os.kill(pid, 0)
            continue  # its supervisor still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            rows.append(crash_row(json.loads(path.read_text()), SENTINEL_REASON))
        except (ValueError, KeyError, ImportError, AttributeError):
            pass  # not ours to judge; leave nothing half-read behind
        path.unlink(missing_ok=True)
    return rows
