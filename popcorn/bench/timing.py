"""Timing and memory: forward, backward and the whole step, as median and 20/80 quantiles.

CUDA: cold-L2 event timing (the L2 flush outside the timed region); when a call is too short
for per-call events to see past launch overhead, CUDA-graph replay of many unrolled calls that
rotate through enough input copies to defeat L2; such a pair's forward and step graphs replay by
turns and each step replay less the forward beside it is a backward sample. Each batch is enqueued while
the device spins on a head start, so a stalled host never leaves an idle gap inside a timed region. Samples come in
doubling batches until their 20-80% spread settles within 2% of the median or the target wall time
is spent (a settled median gains nothing from more). Warm-ups run before the timed samples, beside
other workers' trials, and graph capture (host work) beside anything; only the samples hold the
device alone, a canary first (a fixed tiny call: the device state the samples are taken in, in the row).
CPU: a perf_counter loop. Peak memory comes from one untimed call, so no timer buffer ever counts. Host
wall time per call is measured without synchronizing: what a training loop pays on the CPU side.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Callable

import torch

from popcorn.core.settings import settings

from . import lane
from .calls import cotangents, graded, leaves_of, outputs_of, prepare
from .device_state import canary, settle

GRAPH_BELOW_MS = 1.0  # below this, per-call events carry launch gaps and L2 luck: replay graphs instead
MIN_REPS, MAX_REPS = 10, 2000
SETTLED = 0.02  # samples whose 20-80% spread is within 2% of their median have settled: more add nothing


def settled(samples: list[float]) -> bool:
    """Whether ``samples``' 20-80% spread is within SETTLED of their median."""
    median, q20, q80 = quantiles(samples)
    return q80 - q20 <= SETTLED * median


def sampled(batch: Callable[[int], list], budget: int, target_ms: float | None = None,
            clock: Callable[[], float] = time.perf_counter, done: Callable[[list], bool] = settled) -> list:
    """Samples from ``batch(n)`` in doubling batches, MIN_REPS first, until they are ``done`` (settled:
    SETTLED), the ``budget`` of samples is spent or ``target_ms`` of wall time is (POPCORN_BENCH_TARGET_MS:
    the time spent measuring a quantity, the host's included, so a launch-bound call costs no more than a
    device-bound one). A batch never outruns the time left by much: it is sized by the time per sample
    so far."""
    target = settings().bench_target_ms if target_ms is None else target_ms
    budget = max(MIN_REPS, budget)
    t0 = clock()
    samples = batch(min(2 * MIN_REPS, budget))
    while len(samples) < budget:
        spent = (clock() - t0) * 1e3
        if done(samples) or spent >= target:
            break
        per_sample = spent / len(samples)
        samples += batch(max(1, min(len(samples), budget - len(samples), int((target - spent) / max(per_sample, 1e-6)))))
    return samples


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    """(median, q20, q80)."""
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q = statistics.quantiles(samples, n=10, method="inclusive")
    return statistics.median(samples), q[1], q[7]


class Step:
    """The three timed quantities of one implementation on one argument set."""

    def __init__(self, fn: Callable, arguments: dict, grad: bool):
        self.fn, self.grad = fn, grad
        self.args = prepare(arguments, None, grad)
        self.leaves = leaves_of(self.args)

    def forward(self):
        return self.fn(**self.args)

    def _cots(self, outs):
        if not hasattr(self, "_cot"):
            self._cot = [c.to(o.dtype) if isinstance(o, torch.Tensor) and o.is_floating_point() else c
                         for c, o in zip(cotangents(outs, 0), outs)]
        return self._cot

    def backward_of(self, outs, retain: bool):
        idx = graded(outs)
        cots = self._cots(outs)
        return torch.autograd.grad([outs[i] for i in idx], list(self.leaves.values()), [cots[i] for i in idx],
                                   allow_unused=True, retain_graph=retain)

    def step(self):
        return self.backward_of(outputs_of(self.forward()), retain=False)

    def backward_pair(self):
        """(setup, call): setup runs a fresh forward outside the timed region, call runs its backward.

        A fresh graph per call, never a retained one: compiled backwards donate their buffers
        and refuse retain_graph, and a training step never replays one graph either.
        """
        state = {}

        def setup():
            state["outs"] = outputs_of(self.forward())

        def call():
            return self.backward_of(state.pop("outs"), retain=False)
        return setup, call


# -- CPU ----------------------------------------------------------------------------------------
def _noop():
    return None


def time_cpu(call: Callable, setup: Callable = _noop) -> list[float]:
    setup()
    call()  # warm up (first-call allocations, compile)
    samples = []
    target = settings().bench_target_ms  # precision traded for throughput (POPCORN_BENCH_TARGET_MS)
    start = time.perf_counter()
    while len(samples) < MIN_REPS or (time.perf_counter() - start) * 1e3 < target and len(samples) < MAX_REPS:
        setup()
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


# -- CUDA ---------------------------------------------------------------------------------------
# untimed warm-up before timing: wall time, fewest and most calls. Short: the correctness trials and the host
# time before it have run the call dozens of times, and clock_up sees to the clock (at 25 ms, the three warm-ups
# held the shared lane 75 ms a pair)
WARM_MS, WARM_CALLS = 5.0, (3, 200)
LEAD_MS = (0.5, 50.0)  # the device's head start before a batch of samples: at least, at most
# calls on a graph's capture stream before capture, as torch's own examples warm one (3): each input copy once
# is as many (up to 16; the trials ran the function already), not each twice (32 eager steps of the reference
# per graph, in the shared lane)
READY_CALLS = 3
_cycles_per_ms: dict = {}  # device -> spin cycles of torch.cuda._sleep per millisecond (None: unavailable)


def _spin_rate(device: torch.device) -> float | None:
    """Cycles of ``torch.cuda._sleep`` per millisecond on ``device``, measured once."""
    if device not in _cycles_per_ms:
        try:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(100_000)  # warm the kernel up
            s.record()
            torch.cuda._sleep(2_000_000)
            e.record()
            torch.cuda.synchronize(device)
            _cycles_per_ms[device] = 2_000_000 / max(s.elapsed_time(e), 1e-3)
        except Exception:  # noqa: BLE001 - a build without the spin kernel times without a head start
            _cycles_per_ms[device] = None
    return _cycles_per_ms[device]


CLOCK_UP = (0.9, 10.0, 200.0)  # before timed samples: spin to this share of the max SM clock, or a plateau
# this many ms long, for at most this many ms
_nvml: dict = {}  # device -> (pynvml, its handle, max SM clock in MHz), or None where NVML cannot say


def _nvml_of(device: torch.device):
    """(pynvml, the device's handle, its max SM clock in MHz), or None where NVML cannot say."""
    if device not in _nvml:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{torch.cuda.get_device_properties(device).uuid}")
            _nvml[device] = (pynvml, handle, pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001 - no pynvml, no NVML, a build without device uuids
            _nvml[device] = None
    return _nvml[device]


def sm_clock(device: torch.device) -> tuple[int, int] | None:
    """(current, max) SM clock of ``device`` in MHz through NVML; None where NVML is missing or cannot say."""
    got = _nvml_of(device)
    if got is None:
        return None
    nvml, handle, top = got
    try:
        return nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM), top
    except Exception:  # noqa: BLE001
        return None


def process_bytes(device: torch.device, pid: int) -> int | None:
    """Device memory process ``pid`` holds on ``device`` by NVML (context included); None where NVML cannot
    say (no NVML, the process not listed, as in a container that hides it)."""
    got = _nvml_of(device)
    if got is None:
        return None
    nvml, handle, _ = got
    try:
        for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == pid and p.usedGpuMemory is not None:
                return int(p.usedGpuMemory)
    except Exception:  # noqa: BLE001
        return None
    return None


def _spin_2ms(device: torch.device) -> bool:
    rate = _spin_rate(device) if device.type == "cuda" else None
    if rate is None:
        return False
    torch.cuda._sleep(int(rate * 2.0))
    torch.cuda.synchronize(device)
    return True


def clock_up(device: torch.device, clock=sm_clock, spin=_spin_2ms, wall=time.perf_counter) -> bool:
    """Keep the device busy until its SM clock is up: CLOCK_UP[0] of its max, or no higher for CLOCK_UP[1]
    ms (a power or thermal cap), for at most CLOCK_UP[2] ms. An idle H100 drops its SM clock to 345 of 1980
    MHz within seconds, and a serial fill's device idles while the host compiles: timing must not start on a
    clock still rising. In run 12 it never had to wait (the shared lane's warm-ups just before bring the clock
    up); it costs one NVML query then. Returns whether it had to spin."""
    now = clock(device)
    if now is None or now[0] >= CLOCK_UP[0] * now[1]:
        return False
    t0 = best_at = wall()
    best = now[0]
    while (wall() - t0) * 1e3 < CLOCK_UP[2]:
        if not spin(device):
            return False
        now = clock(device)
        if now is None or now[0] >= CLOCK_UP[0] * now[1]:
            break
        if now[0] > best:
            best, best_at = now[0], wall()
        elif (wall() - best_at) * 1e3 >= CLOCK_UP[1]:
            break
    return True


class Graph:
    """A captured CUDA graph, how many calls one replay makes, and what it reads: a replay reads and writes
    the addresses captured, so the input copies must live as long as the graph (freed, the allocator hands
    their memory to other tensors, and replays time garbage: an index read from it trips a device assert)."""

    def __init__(self, graph, calls: int, keep=()):
        self.graph, self.calls, self.keep = graph, calls, keep

    def reset(self) -> None:
        self.graph.reset()  # its memory pool goes back before the next capture
        self.keep = ()


_EMPTY_GRAPHS: list = []  # captured graphs that recorded nothing (see CudaTimer.capture)


class CudaTimer:
    def __init__(self, device: torch.device):
        self.device = device
        props = torch.cuda.get_device_properties(device)
        self.l2_bytes = getattr(props, "L2_cache_size", 50 * 2**20)
        self.flush = torch.empty(max(4 * self.l2_bytes, 64 * 2**20) // 4, dtype=torch.int32, device=device)
        self.host_ms_per_sample = 0.1  # until a batch says otherwise

    def _ahead(self, enqueue: Callable[[], None], n: int) -> None:
        """Run ``enqueue`` (the launches of a batch of ``n`` samples) while the device spins: with the host
        ahead of the device, a host stall (other workers compiling on the same cores) is never an idle gap
        inside a timed region. The head start is 1.5x what the host last took per sample, times ``n``."""
        rate = _spin_rate(self.device)
        if rate is not None:
            lead = min(max(1.5 * self.host_ms_per_sample * n, LEAD_MS[0]), LEAD_MS[1])
            torch.cuda._sleep(int(rate * lead))
        t0 = time.perf_counter()
        enqueue()
        self.host_ms_per_sample = (time.perf_counter() - t0) * 1e3 / max(n, 1)

    def warm(self, call: Callable, setup: Callable = _noop) -> None:
        """Untimed calls until WARM_MS of wall time or WARM_CALLS[1] calls, at least WARM_CALLS[0]: clocks
        up, lazy compiles and allocator pools done. The device may be shared meanwhile."""
        t0 = time.perf_counter()
        for i in range(WARM_CALLS[1]):
            if i >= WARM_CALLS[0] and (time.perf_counter() - t0) * 1e3 >= WARM_MS:
                break
            setup()
            call()
        torch.cuda.synchronize(self.device)

    def events(self, call: Callable, setup: Callable = _noop, warm: bool = True) -> list[float]:
        """Cold-L2 per-call event timing; ``setup`` and the flush run before the start event.
        ``warm=False``: the caller has warmed ``call`` up already (outside the exclusive lane)."""
        if warm:
            self.warm(call, setup)
        est = self._estimate(call, setup)
        reps = min(max(MIN_REPS, int(settings().bench_target_ms / max(est, 1e-3))), MAX_REPS)

        def batch(n: int) -> list[float]:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]

            def enqueue():
                for s, e in zip(starts, ends):
                    setup()
                    self.flush.zero_()
                    s.record()
                    call()
                    e.record()
            self._ahead(enqueue, n)
            torch.cuda.synchronize(self.device)
            return [s.elapsed_time(e) for s, e in zip(starts, ends)]
        return sampled(batch, reps)

    def _estimate(self, call: Callable, setup: Callable = _noop) -> float:
        """Milliseconds of one call, the fastest of three: other workers' trials on the device (the shared
        lane, where graphs are sized) only add time, so the graph a parallel fill captures has as many
        calls per replay as a serial fill's."""
        best = math.inf
        for _ in range(3):
            setup()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            call()
            e.record()
            torch.cuda.synchronize(self.device)
            best = min(best, s.elapsed_time(e))
        return best

    def ready(self, calls: list[Callable]):
        """Run ``calls`` on a side stream, as graph capture requires (its lazy setup done on that stream: each
        call once, at least READY_CALLS in all); returns the stream. This runs on the device (beside other
        workers' trials, not their timing): :meth:`capture` runs nothing."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for c in calls * -(-READY_CALLS // len(calls)):
                c()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        return stream

    def capture(self, calls: list[Callable], est_ms: float, stream=None) -> "Graph":
        """A CUDA graph of unrolled calls cycling through ``calls`` (each on its own inputs), about 1 ms
        of work per replay, on ``stream`` (from :meth:`ready`; made here when None). Capturing records the
        launches and runs none: host work, which a fill does outside the device lanes. The first replay,
        which uploads the graph, is :meth:`replay`'s."""
        stream = self.ready(calls) if stream is None else stream
        per_graph = max(len(calls), int(math.ceil(1.0 / max(est_ms, 1e-4))))
        per_graph = min(len(calls) * max(1, per_graph // len(calls)), 1000)
        g = torch.cuda.CUDAGraph()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            with torch.cuda.graph(g, stream=stream):
                for i in range(per_graph):
                    calls[i % len(calls)]()
        if any("graph is empty" in str(w.message).lower() for w in said):
            # the calls ran nothing on the capture stream; torch (2.11) aborts the process that destroys such a
            # graph (run 13: liger's cross entropy at two tokens, a false crash row), so it is never destroyed
            _EMPTY_GRAPHS.append(g)
            raise RuntimeError("the captured graph is empty: the calls ran nothing on the capture stream")
        return Graph(g, per_graph, keep=calls)  # bound methods of the Steps: their input copies stay alive

    def replay(self, graph: "Graph", est_ms: float) -> list[float]:
        """Per-call milliseconds of ``graph``, one sample per replay."""
        return self.replay_turns([graph], est_ms * graph.calls)[0]

    def replay_turns(self, graphs: list["Graph"], round_ms: float) -> list[list[float]]:
        """Per-call milliseconds of each of ``graphs``, replayed by turns (one sample of each per round) until
        every one's samples settle; ``round_ms``: the estimated milliseconds of one round. By turns, a step
        replay less the forward replay beside it is a backward sample (see :func:`_cuda_samples`)."""
        for g in graphs:
            g.graph.replay()  # the first replay after others' work pays for its pages and clocks
        replays = min(max(MIN_REPS, int(settings().bench_target_ms / max(round_ms, 1e-3))), 200)

        def batch(n: int) -> list[tuple[float, ...]]:
            marks = [[torch.cuda.Event(enable_timing=True) for _ in range(len(graphs) + 1)] for _ in range(n)]

            def enqueue():
                for row in marks:
                    row[0].record()
                    for g, end in zip(graphs, row[1:]):
                        g.graph.replay()
                        end.record()
            self._ahead(enqueue, n)
            torch.cuda.synchronize(self.device)
            return [tuple(a.elapsed_time(b) / g.calls for g, a, b in zip(graphs, row, row[1:])) for row in marks]
        rounds = sampled(batch, replays, done=lambda got: all(settled(list(col)) for col in zip(*got)))
        return [list(col) for col in zip(*rounds)]

    def copies(self, arguments: dict) -> int:
        """How many input copies a graph rotates through so one round moves 3x the L2."""
        nbytes = sum(v.numel() * v.element_size() for v in arguments.values() if isinstance(v, torch.Tensor))
        want = int(math.ceil(3 * self.l2_bytes / max(nbytes, 1)))
        free, _ = torch.cuda.mem_get_info(self.device)
        return max(1, min(want, 16, int(free * 0.25 // max(nbytes, 1))))


def peak_mb(call: Callable, device: torch.device) -> float | None:
    """Peak allocated memory above the pre-call baseline for one untimed call, in MiB (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = call()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return peak / 2**20


def host_us(call: Callable, device: torch.device, n: int = 20) -> float:
    """Median host wall time of one call without a device sync, in microseconds."""
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1e6)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(samples)


def measure(fn: Callable, arguments: dict, grad: bool, device: torch.device) -> tuple[dict, str]:
    """Time forward, backward and the step of ``fn`` on ``arguments``; returns (timing columns, timer).

    Only the timed samples hold the device alone (:mod:`popcorn.bench.lane`): peak memory is counted
    per process and host time is the CPU's, so they run beside other workers' trials, with the warm-ups,
    in one shared hold: a pair waits for the lane twice, not once per step. Graph capture runs nothing on
    the device and holds no lane (it is host work: 0.02-0.04 s a pair on an H100, run 12)."""
    step = Step(fn, arguments, grad)
    pair = step.backward_pair() if grad else (None, None)
    timer = CudaTimer(device) if device.type == "cuda" else None
    out: dict = {}
    graphs: dict = {}
    try:
        with lane.hold(lane.SHARED), lane.phase("prep"):
            step.step() if grad else step.forward()  # lazy compiles and autotuning must not count as memory
            out["fwd_mem_mb"] = peak_mb(step.forward, device)
            if grad:
                out["step_mem_mb"] = peak_mb(step.step, device)
            out["host_us"] = round(host_us(step.forward, device), 3)
            if grad:  # what an eager training loop pays the host per call: ranks eager calls beside device time
                out["step_host_us"] = round(host_us(step.step, device), 3)
            ready = _prepare(timer, step, pair, fn, arguments, grad) if timer is not None else {}
            if timer is not None:
                canary(timer)
        if timer is not None:
            with lane.phase("capture"):
                _capture(timer, ready, graphs)
            del ready
            samples, timer_name, out["canary_us"] = _cuda_samples(timer, step, pair, graphs, grad)
        else:
            timer_name = "cpu"
            with lane.hold(lane.EXCLUSIVE):
                samples = {"fwd": time_cpu(step.forward)}
                if grad:
                    samples["bwd"] = time_cpu(*reversed(pair))
                    samples["step"] = time_cpu(step.step)
    finally:
        _reset(graphs)
    for k, s in samples.items():
        out[f"{k}_ms"], out[f"{k}_q20_ms"], out[f"{k}_q80_ms"] = (round(v, 6) for v in quantiles(s))
    return out, timer_name


def _prepare(timer: CudaTimer, step: Step, pair: tuple, fn, arguments: dict, grad: bool) -> dict:
    """The untimed device work of CUDA timing, run beside other workers' trials: warm-ups, and for a forward
    (and step) short enough to replay (see :func:`_cuda_samples`), the graphs' input copies warmed up on
    their capture streams. Returns {quantity: (calls, est_ms, stream)} for :func:`_capture`; {} for none."""
    setup, call = pair
    timer.warm(step.forward)
    if grad:
        timer.warm(step.step)
        timer.warm(call, setup)
    rough = timer._estimate(step.forward)  # beside others' work: whether to capture, and graph sizes
    ready: dict = {}
    if rough < 2 * GRAPH_BELOW_MS:
        try:
            steps = [Step(fn, arguments, grad) for _ in range(timer.copies(arguments))]
            calls = [s.forward for s in steps]
            ready["fwd"] = (calls, rough, timer.ready(calls))
            if grad:
                calls = [s.step for s in steps]
                ready["step"] = (calls, timer._estimate(step.step), timer.ready(calls))
        except Exception:  # noqa: BLE001 - timed by events instead
            torch.cuda.synchronize(timer.device)
            ready = {}
    return ready


def _capture(timer: CudaTimer, ready: dict, graphs: dict) -> None:
    """Capture the graphs :func:`_prepare` made ready into ``graphs``, outside the device lanes (capturing
    runs nothing); none where one fails."""
    try:
        for k, (calls, est, stream) in ready.items():
            graphs[k] = timer.capture(calls, est, stream)
    except Exception:  # noqa: BLE001 - a kernel that syncs or allocates on the host cannot be captured
        torch.cuda.synchronize(timer.device)
        _reset(graphs)


def _cuda_samples(timer: CudaTimer, step: Step, pair: tuple, graphs: dict,
                  grad: bool) -> tuple[dict, str, float | None]:
    """Graph replays for a forward (and step, and the backward as their difference) shorter than
    GRAPH_BELOW_MS; per-call events otherwise, for the backward of longer calls (each needs a fresh forward)
    and wherever a graph cannot be captured or replayed. Returns (samples, timer name, the canary's us).
    The timed samples run in one exclusive hold, so a pair waits once for the device to drain; the canary
    times in it first, the device's state the samples are taken in."""
    setup, call = pair
    samples: dict = {}
    name = "cuda-events"
    with lane.hold(lane.EXCLUSIVE):
        with lane.phase("clock"):  # the clock up, then the state POPCORN_DEVICE_STATE asks for, by the canary
            clock_up(timer.device)
            state = settle(timer)
        est = timer._estimate(step.forward)
        if graphs and est < GRAPH_BELOW_MS:
            try:
                if grad:
                    # by turns: each step replay less the forward beside it is a backward sample. Per-call events
                    # carry the launch gaps of calls this short: run 14's event-timed backwards of graph-timed
                    # pairs read 1.9x the step less the forward, and their spread (23%) never settled, so each
                    # held the device for the whole target time
                    fwd, stp = graphs["fwd"], graphs["step"]
                    samples["fwd"], samples["step"] = timer.replay_turns(
                        [fwd, stp], est * fwd.calls + timer._estimate(step.step) * stp.calls)
                    bwd = [b - a for a, b in zip(samples["fwd"], samples["step"])]
                    if quantiles(bwd)[0] > 0:  # else a backward lost in the noise: its own events say
                        samples["bwd"] = bwd
                else:
                    samples["fwd"] = timer.replay(graphs["fwd"], est)
                name = "cuda-graph"
            except Exception:  # noqa: BLE001 - a replay that fails is timed by events instead
                torch.cuda.synchronize(timer.device)
                samples.clear()
        if name != "cuda-graph":
            samples["fwd"] = timer.events(step.forward, warm=False)
            if grad:
                samples["step"] = timer.events(step.step, warm=False)
        if grad and "bwd" not in samples:
            samples["bwd"] = timer.events(call, setup, warm=False)
    return samples, name, state


def _reset(graphs: dict) -> None:
    for g in graphs.values():
        g.reset()
    graphs.clear()
