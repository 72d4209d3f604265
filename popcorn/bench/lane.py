"""The device lanes of a fill, as the process that measures sees them, and where its time goes.

A parallel fill runs several workers on one device. Correctness trials may share the device with
each other; timing must have it alone. Each worker wraps its device work in :func:`hold`:
``"shared"`` around one correctness trial, ``"exclusive"`` around timing. In a worker of a
parallel fill each hold is a request to the supervisor (:mod:`popcorn.bench.arbiter`), answered
when the lane is free; where fills share a device (:mod:`popcorn.bench.device_lane`), a worker of
any fill then takes the device's lane across processes too. Outside a fill's worker (bench mode,
``compare``) a hold costs nothing.

:func:`phase` adds a block's seconds to :data:`clock` (warm-up, truth, trials, timing, wait, ...:
:data:`popcorn.bench.summary.PHASES`), which the worker sends back with each row, so a fill can say
where its wall time went.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import time

SHARED, EXCLUSIVE, RELEASE, HELD = "shared", "exclusive", "release", "held"

_conn = None  # the worker's pipe to its supervisor, in a fill's worker
_device = None  # the device's lanes across processes (a device_lane.DeviceLane), where shared
clock: dict[str, float] = {}  # phase -> seconds, for the task being measured
held: str | None = None  # the lane this process holds now (tests read it)


def connect(conn, device=None) -> None:
    """Route holds through ``conn`` (and ``device``, a DeviceLane): a fill's worker calls this once."""
    global _conn, _device
    _conn, _device = conn, device


_cores: tuple[set, set] | None = None  # (the timing core, the others): where a worker's threads may run


KEEP_A_CORE_FROM = 4  # cores in the CPU set from which one is kept for timing (of two, it would halve the rest)


def keep_a_core_for_timing(least: int = KEEP_A_CORE_FROM) -> set | None:
    """Keep the first core of this process's CPU set for the thread that holds the exclusive lane: the
    calling thread, and every thread it starts from now on, runs on the other cores, and :func:`hold`
    moves the timing thread onto the kept one for its exclusive holds: the host side of a timing (launches,
    and calls that wait on the host inside, as liger's cross entropy at a few tokens does) never shares its
    core with other workers' compiles. (That pair still timed 1.6x slower in a parallel fill than in a serial
    one with it, run 12, and 23% apart between two serial fills: its noise is not only the cores'.) A fill's
    worker calls it first thing, once; returns the cores left to the rest (None: fewer than ``least`` cores,
    or no affinity on this system, and nothing kept)."""
    global _cores
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if len(mine) < max(2, least):
        return None
    _cores = ({mine[0]}, set(mine[1:]))
    os.sched_setaffinity(0, _cores[1])
    return _cores[1]


def _pin(timing: bool) -> None:
    if _cores is not None:
        try:
            os.sched_setaffinity(0, _cores[0] if timing else _cores[1])
        except OSError:
            pass  # the CPU set shrank under us (a cgroup change): time where we are


_nested: list[float] = []  # per open phase, the seconds of the phases inside it


@contextlib.contextmanager
def phase(name: str):
    """Adds the block's seconds to ``clock[name]``, less those of phases inside it (a lane wait
    within timing counts once, as wait)."""
    t0 = time.perf_counter()
    _nested.append(0.0)
    try:
        yield
    finally:
        spent = time.perf_counter() - t0
        clock[name] = clock.get(name, 0.0) + spent - _nested.pop()
        if _nested:
            _nested[-1] += spent


@contextlib.contextmanager
def hold(kind: str):
    """Hold the device lane ``kind`` (SHARED or EXCLUSIVE) for the block; waiting counts as ``wait``.
    The supervisor grants it among the fill's workers; then the device's lane across processes
    (:mod:`popcorn.bench.device_lane`), when there is one, is taken too, and the supervisor told
    (HELD): its watchdog does not count the wait for another fill."""
    global held
    if _conn is None or held is not None:  # a hold inside a hold (an autotuner's benchmark in a trial) has its lane
        yield
        return
    with phase("wait"):
        _conn.send(("lane", kind))
        _conn.recv()  # the go-ahead
        if _device is not None:
            try:
                _device.take(kind)
            finally:
                _conn.send(("lane", HELD))
    held = kind
    if kind == EXCLUSIVE:
        _pin(timing=True)
    try:
        yield
    finally:
        held = None
        if kind == EXCLUSIVE:
            _pin(timing=False)
        if _device is not None:
            _device.release()
        _conn.send(("lane", RELEASE))


# Autotuners that time configs without triton.testing.do_bench (quack's: CUDA graphs over L2-cold input
# copies), by backend: (module, class, method timing one config). Imported only once a task of theirs runs.
LIBRARY_AUTOTUNERS = {"quack": ("quack.autotuner", "Autotuner", "_bench")}
_guarding = False  # guard_autotuning ran: library autotuners are guarded as their backends come up
# Triton's do_bench as a fill's autotuners call it: at most 2 ms of warm-up and 10 ms of repetitions (Triton's
# defaults are 25 and 100; inductor asks for 25 and 40).
# Each config's benchmark holds the shared lane, and every timing waits for the lane to drain: fla tunes 7 to
# 18 configs per new shape, inductor a few per reduction kernel. With Triton's at 2 and 10 ms and inductor's
# still at 25 and 40, autotuning held the shared lane as long as the correctness trials did in a 12-worker
# H100 fill (74 and 71 worker-seconds in 152 s; run 12). A config's median over 10 ms (hundreds of calls of a
# microsecond kernel with the L2 flushed before each, ten of a millisecond one) still tells apart configs
# that differ by a few %.
AUTOTUNE_BENCH_MS = {"warmup": 2, "rep": 10}


def guard_autotuning() -> None:
    """Autotuners benchmark their configs on the device at a kernel's first call (Triton's, which liger
    and fla use, and inductor's): make those benchmarks hold the shared lane, so they never run beside
    another worker's timing, while the compiles around them keep running outside the lanes. Libraries
    with an autotuner of their own are guarded by :func:`guard_backend` when their first task runs."""
    global _guarding
    _guarding = True
    try:
        import triton.testing
    except ImportError:
        pass
    else:  # the Autotuner asks the driver for do_bench, which imports it at each call
        _in_shared_lane(triton.testing, "do_bench", compile_first=True, caps=AUTOTUNE_BENCH_MS)
        _tune_in_one_hold()
    try:
        from torch._inductor.runtime import benchmarking
    except ImportError:
        return
    if hasattr(benchmarking, "set_gpu_benchmark_lock_context"):  # torch 2.13 and later
        benchmarking.set_gpu_benchmark_lock_context(lambda: hold(SHARED))
    else:
        _in_shared_lane(benchmarking.benchmarker, "benchmark_gpu")


_compiles = None  # a Triton autotuner's compiling pass (a _Compiles): each config's benchmark only compiles it
# A new key's configs compile side by side in the compiling pass: ptxas, a subprocess, is most of each
# compile (two thirds of fla's layer-norm kernel's), and fla compiles 6 to 15 configs per new shape.
COMPILE_THREADS = 8


def _tune_in_one_hold() -> None:
    """Triton's Autotuner with its timings cached on disk (TRITON_CACHE_AUTOTUNING, set in a fill's workers,
    and fla's own setting) benchmarks a new key's configs through ``check_disk_cache``: there, every config is
    compiled first (outside the lanes, side by side) and then every config is benchmarked in one shared
    hold. One hold per config waited for the timings queued meanwhile 7 to 18 times per new fla shape."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    original = getattr(Autotuner, "check_disk_cache", None)
    if original is None or getattr(original, "popcorn_lane", False):
        return
    if list(inspect.signature(original).parameters) != ["self", "tuning_key", "configs", "bench_fn"]:
        return  # another Triton: its per-config holds stand
    Autotuner.check_disk_cache = in_one_hold(original)


def in_one_hold(check_disk_cache):
    """``check_disk_cache`` whose benchmark runs twice: a compiling pass (do_bench hands each config's
    kernel call to :class:`_Compiles` and times nothing), then the timed pass, holding the shared lane once."""
    def wrapped(self, tuning_key, configs, bench_fn):
        def bench():
            global _compiles
            if held is not None:  # already in a hold (a trial's): benchmark there
                return bench_fn()
            _compiles = _Compiles(COMPILE_THREADS if _side_by_side(self) else 1)
            try:
                bench_fn()
            finally:
                _compiles.finish()
                _compiles = None
            with hold(SHARED), phase("autotune"):
                return bench_fn()
        return check_disk_cache(self, tuning_key, configs, bench)
    wrapped.popcorn_lane = True
    return wrapped


def _side_by_side(tuner) -> bool:
    """Whether ``tuner``'s kernel calls may run concurrently: not where a hook keeps state between a call's
    start and end (restore_value's copies on the tuner, a user's own hooks)."""
    return not (getattr(tuner, "restore_value", None) or getattr(tuner, "user_defined_pre_hook", False)
                or getattr(tuner, "user_defined_post_hook", False))


class _Compiles:
    """The kernel calls of a compiling pass: the first in the calling thread (Triton sets up what it does once
    per kernel), the others in up to ``threads`` threads on the caller's device and stream, all finished by
    :meth:`finish`. Their errors are dropped: the timed pass calls every config again and meets them there."""

    def __init__(self, threads: int):
        self.threads, self.pool, self.place = threads, None, None
        self.first = True

    def submit(self, call) -> None:
        if self.first or self.threads <= 1:
            self.first = False
            try:
                call()
            except Exception:  # noqa: BLE001 - the timed pass reports it
                pass
            return
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="popcorn-compile")
            self.place = _callers_stream()
        self.pool.submit(self.place, call)

    def finish(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def _callers_stream():
    """A runner of a call on this thread's CUDA device and stream (both are per thread in torch), so a config
    launched from a compile thread queues behind the work before it."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return lambda call: call()
    device = torch.cuda.current_device()
    stream = torch.cuda.current_stream(device)

    def run(call):
        with torch.cuda.device(device), torch.cuda.stream(stream):
            call()
    return run


def guard_backend(backend: str) -> None:
    """After :func:`guard_autotuning`: the LIBRARY_AUTOTUNERS entry of ``backend`` holds the shared lane
    while it times a config (once per process; nothing where the library is missing)."""
    spec = LIBRARY_AUTOTUNERS.get(backend)
    if not _guarding or spec is None:
        return
    module, cls, method = spec
    try:
        owner = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError):  # not installed, or another version: the trials will say
        return
    _in_shared_lane(owner, method)


def _in_shared_lane(owner, name: str, compile_first: bool = False, caps: dict | None = None) -> None:
    """Replace ``owner.name`` by a function that calls it holding the shared lane (once). ``compile_first``:
    the benchmark's callable (its first argument) is called once before, outside the lane: a Triton
    autotuner's first call of a config JIT-compiles it, seconds of host work that would otherwise hold
    the lane and keep every timing waiting (one launch beside others' work, as the warm-up's).
    ``caps``: the most each of these keyword arguments may be, for a call that passes only the callable and
    keywords: absent or larger, the cap (inductor asks for 25 ms of warm-up and 40 of repetitions per config,
    Triton's Autotuner for its defaults, 25 and 100); smaller, the caller's.
    """
    fn = getattr(owner, name)
    if getattr(fn, "popcorn_lane", False):
        return

    def shared(*args, **kwargs):
        if compile_first and _compiles is not None and args and callable(args[0]):
            _compiles.submit(args[0])  # the autotuner's compiling pass (:func:`in_one_hold`): no timing, no lane
            quantiles = kwargs.get("quantiles")
            return [0.0] * len(quantiles) if quantiles else 0.0
        if caps and len(args) == 1:
            kwargs = {**kwargs, **{k: min(v, kwargs.get(k, v)) for k, v in caps.items()}}
        if compile_first and held is None and args and callable(args[0]):
            args[0]()
        with hold(SHARED), phase("autotune"):
            return fn(*args, **kwargs)
    shared.popcorn_lane = True
    setattr(owner, name, shared)


def take_clock() -> dict[str, float]:
    """The phases of the task just measured, and a fresh clock for the next."""
    global clock
    done, clock = clock, {}
    return {k: round(v, 4) for k, v in done.items()}


def other(task_s: float) -> dict[str, float]:
    """:func:`take_clock`, with ``other``: what of the task's ``task_s`` seconds no phase took (taking the task,
    resolving its backend, the device check after it, the reply)."""
    done = take_clock()
    done["other"] = round(max(0.0, task_s - sum(done.values())), 4)
    return done
