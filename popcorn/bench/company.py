"""Idle CUDA contexts kept open beside a fill's timing, so every fill times in one device state.

A tiny graph-replayed call times 10-13% faster while other processes hold CUDA contexts on the device,
idle or not (an H100: 1.25 us beside 12 idle contexts, 1.38-1.39 beside 0-4, run 12; the state is read
while the graph replays, not when it is captured, run 15). A parallel fill's timing always has its sibling
workers' contexts beside it; a serial fill's lone worker had none, so the same cases timed 8-15% apart
between the two (runs 12-15). :func:`company` tops the contexts beside a fill's timing up to
:data:`TIMING_COMPANY` with helper processes that each open one and wait, so a fill's rows do not depend on
how many workers measured them. What a process alone on the device (a training step) would see differs by
that much for launch-bound calls; rankings measured in one state hold.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

import torch

from .timing import processes_on

TIMING_COMPANY = 11  # other contexts on the device while a fill times: a 12-worker fill's siblings
READY_S = 60.0  # a helper that has not opened its context by then is left out
# one context on device INDEX with a little memory (as a worker's), held until stdin closes
_HOLD = """
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
ok = (cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), int(sys.argv[1])) == 0
      and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
      and cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1024)) == 0)
print("ready" if ok else "failed", flush=True)
sys.stdin.read()
"""


def needed(device: torch.device | None, workers: int) -> int:
    """Helpers a fill of ``workers`` workers on ``device`` needs beside its timing: its siblings count, and so
    do the processes already on the device (other fills' workers and helpers, where fills share it)."""
    if device is None or device.type != "cuda":
        return 0
    return max(0, TIMING_COMPANY - (max(1, workers) - 1) - processes_on(device))


@contextlib.contextmanager
def company(device: torch.device | None, n: int):
    """Hold ``n`` idle CUDA contexts on ``device`` (helper processes) for the block; yields how many opened.
    Nothing on a CPU device or for ``n`` = 0; a helper that fails (no driver, no memory) is left out and the
    fill goes on beside fewer."""
    if device is None or device.type != "cuda" or n <= 0:
        yield 0
        return
    index = device.index if device.index is not None else 0
    procs = [subprocess.Popen([sys.executable, "-c", _HOLD, str(index)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(n)]
    try:
        yield sum(_ready(p) for p in procs)
    finally:
        for p in procs:
            with contextlib.suppress(OSError, ValueError):
                p.stdin.close()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _ready(proc: subprocess.Popen) -> bool:
    import select

    ready, _, _ = select.select([proc.stdout], [], [], READY_S)
    return bool(ready) and proc.stdout.readline().strip() == "ready"
