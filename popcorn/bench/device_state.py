"""The device state a timing is taken in: priming, the canary, and the policy that settles it.

A tiny call's time has two states on one device (an H100: 1.29 or 1.47 us a call, 12-17% apart for latency-bound
pairs; an H200 the same, 14%): a process alone on its device times in the slower one, and once another CUDA
context has been opened on the device after the process's own, in the faster one (run 6, run 15). A CUDA graph
captured, replayed and destroyed (what every graph-timed pair does) takes it back to the slower one (run 16). A fill
therefore times a fixed tiny call, the canary, first in every timing hold and keeps its time in the row
(``canary_us``), after :func:`settle` has brought about the state POPCORN_DEVICE_STATE asks for.
"""

from __future__ import annotations

import os
import statistics
import warnings

import torch

from popcorn.core.settings import PRIMED, UNPRIMED, device_state, reprimes
from popcorn.schema import STATES_APART

from . import lane

_primed: set = set()  # devices this process has primed
_PRIME = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok = (cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])) == 0
      and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
      and cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1024)) == 0)
sys.exit(0 if ok else 1)
"""


def _open_context(device: torch.device, timeout_s: float = 30.0) -> str | None:
    """Open and close one other CUDA context on ``device`` (a helper process, 0.1-0.3 s); None when it did,
    else why not. The caller holds a lane: it is device work."""
    import subprocess
    import sys

    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        done = subprocess.run([sys.executable, "-c", _PRIME, str(index)], timeout=timeout_s,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return type(e).__name__
    return None if done.returncode == 0 else f"exit status {done.returncode}"


def prime(device: torch.device, timeout_s: float = 30.0) -> bool:
    """Open and close one other CUDA context on ``device`` after this process's own exists.

    Once a second context has been created on the device after the timing process's, graph replays
    of tiny calls run about 14% faster (medium ones 2%) (benchmarks/clock_probe.py --contexts, H200;
    --opened-after, H100 in run 15: 1.47 to 1.29 us, and 4 or 12 contexts no further). A parallel fill's workers
    always see their siblings' contexts; a serial fill's lone worker primes itself so both time in one state
    (:func:`settle` restores it where a process has lost it).
    Runs once per device and process (the probes' priming; a fill primes in :func:`settle`); returns whether
    the helper ran and succeeded (a CPU device, a second call or a failed helper skip it)."""
    if device.type != "cuda" or device in _primed:
        return False
    _primed.add(device)
    with lane.hold(lane.SHARED):  # opening a context is device work: never beside another worker's timing
        failed = _open_context(device, timeout_s)
    _say_unprimed(device, failed)
    return failed is None


def _say_unprimed(device, failed: str | None) -> None:
    """Warn (once per process and device: a fill's first hold or a probe's prime) that the helper failed; said,
    not raised: the rows' canary_us shows which state the process then timed in."""
    if failed:
        warnings.warn(f"device_state: the helper that opens a second CUDA context on {device} failed ({failed}); "
                      f"this process (pid {os.getpid()}) times unprimed", RuntimeWarning, stacklevel=3)


# The canary: a fixed tiny call (a fp16 mul of this shape, 1.3-1.6 us a call on an H100), graph-replayed.
CANARY_SHAPE, CANARY_COPIES = (4096, 64), 16
_canaries: dict = {}  # device -> (the canary's Graph, its estimated ms per call), or None where it cannot be made


def canary(timer):
    """The canary's graph on ``timer``'s device and its estimate, made once per process (device work: the caller
    holds the shared lane); None where a graph cannot be captured."""
    if timer.device not in _canaries:
        try:
            xs = [torch.randn(*CANARY_SHAPE, device=timer.device, dtype=torch.float16) for _ in range(CANARY_COPIES)]
            calls = [lambda x=x: x.mul(1.0001) for x in xs]
            est = timer._estimate(calls[0])
            _canaries[timer.device] = (timer.capture(calls, est), est)
        except Exception:  # noqa: BLE001 - the row goes without a canary
            torch.cuda.synchronize(timer.device)
            _canaries[timer.device] = None
    return _canaries[timer.device]


def canary_us(timer) -> float | None:
    """Microseconds per call of the canary (made by :func:`canary` beforehand), median of its replays; the
    caller holds the device alone. None without one."""
    got = _canaries.get(timer.device)
    if got is None:
        return None
    graph, est = got
    try:
        return round(statistics.median(timer.replay(graph, est)) * 1e3, 4)
    except Exception:  # noqa: BLE001 - the samples that follow say whether the device still works
        torch.cuda.synchronize(timer.device)
        return None


def unprime(device) -> bool:
    """Take this process back to the slower state, as every pair's timing does: a tiny graph captured on a stream
    of its own, replayed once and destroyed. Run 16 (H100, ``benchmarks/clock_probe.py --after-events``): of what a
    fill's worker does between priming and timing, only that took a primed process back (1.38 to 1.58 us a call; a
    fresh process: 1.57). First calls of new torch kernels, a Triton compile, 1 GiB freed, 16 new streams, and a
    module loaded and unloaded with a stream made and destroyed (this function before) left it primed. The caller
    holds the device alone. Returns whether it ran (False off CUDA or where the capture fails)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    try:
        x = torch.zeros(64, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream(device)):
            x.add_(1)
        graph.replay()
        torch.cuda.synchronize(device)
        graph.reset()
    except Exception:  # noqa: BLE001 - the canary says which state the samples were then taken in
        torch.cuda.synchronize(device)
        return False
    return True


REPRIMES = 3  # re-primes in a row that do not bring the canary back, after which a process stops (POPCORN_REPRIMES)
_state: dict = {}  # device -> [the fastest canary this process has timed (us), re-primes in a row that failed]


def settle(timer, measure=canary_us, reopen=_open_context, undo=unprime) -> float | None:
    """The canary's us in the state the samples will be taken in, that state brought about as POPCORN_DEVICE_STATE
    asks (:func:`popcorn.core.settings.device_state`); the caller holds the device alone.

    ``primed`` (the default): run 15 (H100) found tiny calls of one parallel worker and one case 12-17% apart,
    seconds apart, as a fresh process's are before and after :func:`prime`, and every serial fill timed as
    unprimed though it primes first (each pair's graphs undo it: run 16). So a process's first hold opens another
    context (nothing else runs on the device meanwhile) and times the canary again: the faster of the two is the
    state to time in. In a later hold, a canary more than STATES_APART slower than the fastest this process has
    timed is re-primed the same way, once per hold. A process whose re-primes fail REPRIMES (POPCORN_REPRIMES)
    times in a row stops trying (its device has one state, or one that priming does not reach).
    ``unprimed``: the state of a process alone on its device, as training runs: :func:`unprime` first, every hold.
    ``off``: the state as found. Whatever the policy, the canary says which state each row was timed in."""
    policy = device_state()
    if policy == UNPRIMED:
        undo(timer.device)
    if policy != PRIMED:
        return measure(timer)
    us = measure(timer)
    if us is None:
        return None
    state = _state.get(timer.device)
    first = state is None
    if first:
        state = _state[timer.device] = [us, 0]
    if first or (us > state[0] * (1 + STATES_APART) and state[1] < reprimes(REPRIMES)):
        failed = reopen(timer.device)
        again = measure(timer) if failed is None else None
        if first:
            _say_unprimed(timer.device, failed)
        else:
            back = again is not None and again <= state[0] * (1 + STATES_APART)
            state[1] = 0 if back else state[1] + 1
        us = again if again is not None else us
    state[0] = min(state[0], us)
    return us
