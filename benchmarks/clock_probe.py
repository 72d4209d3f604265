"""Does a device that idled time tiny calls slower than a busy one (its clock)?

    python benchmarks/clock_probe.py

A serial fill leaves the GPU idle while its host compiles; a parallel fill keeps it busy with other
workers' trials. Latency-bound calls (a few microseconds) timed by graph replay came out up to 20%
faster in parallel fills on an H200. For a tiny and a large call, graph-replay medians and the SM
clock NVML reports, after IDLE_S idle and right after a second of busy device work; then the tiny call
with 16, 112 and 1008 calls per graph replay, and beside 12 idle CUDA contexts; how long the clock
takes to recover after busy work; and graph replays beside 0-12 idle CUDA contexts, with a
``device_state.prime`` check (``--contexts``: that table alone). ``--capture-state``: whether a graph's replay
time follows the contexts on the device when it was captured or while it replays (graphs captured alone,
beside one and beside twelve idle contexts, each replayed in every later state). What sets a process's level
(run 15): ``--opened-after`` (fresh processes before and after N contexts opened and closed), ``--beside-load``
(a primed process beside idle contexts and busy cores), ``--placement`` (inputs allocated after 0-40 GiB of
other tensors), ``--streams`` (the default stream and new ones), ``--decay S`` (a primed process for S
seconds of nothing else, then after another's device work, then after a context opened), ``--levels`` (twelve
fresh processes, alone and primed, on each NUMA node in turn), ``--after-events`` (a primed process after each
thing a fill's worker does before timing). Prints tables.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popcorn.bench.device_state import prime, unprime  # noqa: E402
from popcorn.bench.timing import CudaTimer, _nvml_of, quantiles, sm_clock  # noqa: E402

IDLE_S = 3.0


def clocks() -> tuple[int, int] | None:
    """(current, max) SM clock in MHz through NVML; None where NVML cannot say."""
    return sm_clock(torch.device("cuda", torch.cuda.current_device()))


def nvml_state() -> str:
    """The clocks NVML reports (SM, memory, graphics, video in MHz), the performance state and the clock event
    reasons (a bit mask: idle, power cap, thermal...): what a binary fast/slow state might be; '-' without NVML."""
    got = _nvml_of(torch.device("cuda", torch.cuda.current_device()))
    if got is None:
        return "-"
    nvml, handle, _ = got
    try:
        mhz = [nvml.nvmlDeviceGetClockInfo(handle, c) for c in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM,
                                                                 nvml.NVML_CLOCK_GRAPHICS, nvml.NVML_CLOCK_VIDEO)]
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons",
                          getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        return (f"{'/'.join(map(str, mhz))} P{nvml.nvmlDeviceGetPerformanceState(handle)} "
                f"{reasons(handle) if reasons else 0:#x}")
    except Exception as e:  # noqa: BLE001 - a query this driver lacks
        return f"({type(e).__name__})"


def tiny_calls() -> tuple[list, list]:
    """16 inputs of the tiny call (a 4096x64 fp16 mul, 1-2 us) and a call on each, for a graph to rotate through."""
    xs = [torch.randn(4096, 64, device="cuda", dtype=torch.float16) for _ in range(16)]
    return xs, [lambda x=x: x.mul(1.0001) for x in xs]


def tiny_graph(timer: CudaTimer) -> tuple[list, float, object]:
    """The tiny call's inputs, its estimated milliseconds and a graph of it captured for ``timer`` to replay."""
    xs, fns = tiny_calls()
    est = timer._estimate(fns[0])
    return xs, est, timer.capture(fns, est)


def busy(seconds: float) -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", action="store_true", help="only the table of calls beside idle CUDA contexts")
    ap.add_argument("--suspects", action="store_true", help="only the tables of calls per replay and contexts")
    ap.add_argument("--capture-state", action="store_true", help="only the table of graphs captured beside 0, 1 "
                    "and 12 idle contexts, each replayed in every later state")
    ap.add_argument("--opened-after", action="store_true", help="only the table of a fresh process's tiny call "
                    "before and after N other contexts opened and closed (N processes, or N contexts in one)")
    ap.add_argument("--beside-load", action="store_true", help="only the table of a primed process's tiny call "
                    "beside idle contexts of two kinds and beside busy CPU cores")
    ap.add_argument("--placement", action="store_true", help="only the table of a primed process's tiny call on "
                    "inputs allocated after 0-40 GiB of other tensors")
    ap.add_argument("--levels", action="store_true", help="only the table of 12 fresh processes' tiny call, alone and "
                    "primed, each on the cores of one NUMA node in turn")
    ap.add_argument("--streams", action="store_true", help="only the table of a primed process's tiny call "
                    "replayed on its default stream and on new streams of each priority")
    ap.add_argument("--decay", type=float, metavar="S", help="only the table of a primed process's tiny call "
                    "every 5 s for S s of nothing else, then after another process's device work and after a "
                    "context opened")
    ap.add_argument("--after-events", action="store_true", help="only the table of a primed process's tiny call "
                    "after each thing a fill's worker does between priming and timing (kernels loaded, memory "
                    "freed, streams made)")
    ap.add_argument("--child-level", type=int, metavar="NODE", help=argparse.SUPPRESS)
    ap.add_argument("--child", nargs=2, metavar=("N", "WAY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.opened_after:
        opened_after()
        return 0
    if args.levels:
        levels()
        return 0
    if args.child_level is not None:
        return level_child(args.child_level)
    timer = CudaTimer(torch.device("cuda"))
    if args.child:
        return child(timer, int(args.child[0]), args.child[1])
    for chosen, table in ((args.beside_load, beside_load), (args.placement, placement), (args.streams, streams),
                          (args.decay, lambda t: decay(t, args.decay)), (args.capture_state, capture_state),
                          (args.after_events, after_events)):
        if chosen:
            table(timer)
            return 0
    if args.contexts or args.suspects:
        if args.suspects:
            suspects(timer)
        beside_contexts(timer)
        return 0
    calls = {"tiny (4096x64 fp16 mul)": [torch.randn(4096, 64, device="cuda", dtype=torch.float16) for _ in range(8)],
             "large (8192x8192 fp32 mul)": [torch.randn(8192, 8192, device="cuda") for _ in range(2)]}
    print(f"{'call':<28} {'state':<16} {'clock MHz':>10} {'median us':>10} {'q20-q80 us':>14}")
    for name, xs in calls.items():
        fns = [lambda x=x: x.mul(1.0001) for x in xs]
        est = timer._estimate(fns[0])
        graph = timer.capture(fns, est)
        for state in ("idle", "after busy"):
            if state == "after busy":
                busy(1.0)
            else:
                torch.cuda.synchronize()
                time.sleep(IDLE_S)
            clock = clocks()
            med, q20, q80 = quantiles(timer.replay(graph, est))
            print(f"{name:<28} {state:<16} {clock[0] if clock else '-':>10} {med * 1e3:>10.2f} "
                  f"{q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}", flush=True)
        graph.reset()
    print(f"max SM clock: {clocks()[1] if clocks() else 'unknown (no NVML)'} MHz")
    suspects(timer)
    recovery(timer)
    beside_contexts(timer)
    return 0


def beside_contexts(timer: CudaTimer) -> None:
    """A tiny (1-2 us) and a medium (about 20 us) call by graph replay beside 0-12 other processes that
    hold a CUDA context and do nothing: what a parallel fill's timing lane has around it, and a training
    process does not."""
    calls = {"tiny": [torch.randn(4096, 64, device="cuda", dtype=torch.float16) for _ in range(16)],
             "medium": [torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(4)]}
    graphs = {}
    for name, xs in calls.items():
        fns = [lambda x=x: x.mul(1.0001) for x in xs]
        est = timer._estimate(fns[0])
        graphs[name] = (timer.capture(fns, est), est)
    print(f"\n{'graph replay beside idle contexts':<44} {'tiny us':>10} {'medium us':>10}")

    def row(label: str) -> None:
        meds = [quantiles(timer.replay(g, est))[0] * 1e3 for g, est in graphs.values()]
        print(f"{label:<44} {meds[0]:>10.2f} {meds[1]:>10.2f}", flush=True)

    idle: list = []
    try:
        row("this context alone")
        time.sleep(5.0)
        row("alone, 5 s later")
        row(f"alone, after device_state.prime ({'ran' if prime(torch.device('cuda')) else 'FAILED'})")
        for n in (0, 1, 2, 4, 12, 0):
            while len(idle) < n:
                idle.append(idle_context())
            while len(idle) > n:
                idle.pop().kill()
            time.sleep(0.5)
            row(f"{n} idle contexts")
    finally:
        for proc in idle:
            proc.kill()
        for g, _ in graphs.values():
            g.reset()


def idle_context() -> subprocess.Popen:
    """Another process holding a CUDA context on the device and doing nothing (started once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import torch, time; torch.ones(1, device='cuda'); "
                             "print('ready', flush=True); time.sleep(300)"], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc


def capture_state(timer: CudaTimer) -> None:
    """Run 12's probe captured its 12-context graph after the contexts opened, and its 0-4-context graphs
    before: it could not tell a state fixed when a graph is captured from one read while it replays. Here
    graph A is captured alone, B beside one idle context, C beside twelve, D alone again after they exit;
    every graph captured so far is replayed in each state."""
    _, fns = tiny_calls()
    est = timer._estimate(fns[0])
    graphs: dict = {}
    idle: list = []
    print(f"\n{'tiny call (us), state while replaying':<44} " + " ".join(f"{g:>8}" for g in "ABCD"))

    def state(label: str, capture: str) -> None:
        time.sleep(0.5)
        graphs[capture] = timer.capture(fns, est)
        meds = {k: quantiles(timer.replay(g, est))[0] * 1e3 for k, g in graphs.items()}
        print(f"{label + f' (captured {capture})':<44} " + " ".join(
            f"{meds[k]:>8.2f}" if k in meds else f"{'-':>8}" for k in "ABCD"), flush=True)

    try:
        state("alone", "A")
        idle.append(idle_context())
        state("1 idle context", "B")
        while len(idle) < 12:
            idle.append(idle_context())
        state("12 idle contexts", "C")
        while idle:
            idle.pop().kill()
        state("alone again, after they exit", "D")
    finally:
        for proc in idle:
            proc.kill()
        for g in graphs.values():
            g.reset()


# N contexts on device 0: WAY "one" opens and closes them in turn in this one process (as device_state.prime does),
# "many" is N processes each holding its primary context until every one has it (as a fill's workers)
_OPEN = """
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
dev, ptr = ctypes.c_int(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
for _ in range(int(sys.argv[1])):
    ctx = ctypes.c_void_p()
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)) == 0
    if sys.argv[2] == "one":
        assert cuda.cuCtxDestroy_v2(ctx) == 0
print("ready", flush=True)
sys.stdin.readline()
"""


def open_contexts(n: int, way: str) -> float:
    """Open ``n`` other contexts on the device (all at once), then close them; returns the seconds it took."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, str(n if way == "one" else 1), way], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(n if way == "many" else (1 if n else 0))]
    for proc in procs:
        proc.stdout.readline()
    for proc in procs:
        proc.communicate("\n")
    return time.perf_counter() - t0


def child(timer: CudaTimer, n: int, way: str) -> int:
    """In a fresh process: the tiny call timed alone, then after ``n`` contexts opened and closed (graph captured
    before, and one captured after)."""
    _, fns = tiny_calls()
    est = timer._estimate(fns[0])
    before = timer.capture(fns, est)
    a = quantiles(timer.replay(before, est))[0] * 1e3
    took = open_contexts(n, way)
    time.sleep(0.5)
    b = quantiles(timer.replay(before, est))[0] * 1e3
    after = timer.capture(fns, est)
    c = quantiles(timer.replay(after, est))[0] * 1e3
    print(f"{f'{n} contexts, {way}':<28} {a:>10.2f} {b:>10.2f} {c:>10.2f} {took:>8.2f}", flush=True)
    return 0


def numa_nodes() -> dict[int, set[int]]:
    """NUMA node -> its CPUs, as Linux lists them; {} where it does not."""
    nodes = {}
    for d in Path("/sys/devices/system/node").glob("node[0-9]*"):
        cpus: set[int] = set()
        for part in (d / "cpulist").read_text().strip().split(","):
            if part:
                a, _, b = part.partition("-")
                cpus.update(range(int(a), int(b or a) + 1))
        nodes[int(d.name[4:])] = cpus
    return nodes


def gpu_node() -> int | None:
    """The NUMA node of the PCI bus the GPU sits on (Linux's sysfs); None where it does not say."""
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip().lower()
        return int(Path(f"/sys/bus/pci/devices/{bus[-12:]}/numa_node").read_text())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def level_child(node: int) -> int:
    """A fresh process on ``node``'s cores (-1: anywhere): its tiny call alone and after device_state.prime."""
    cpus = numa_nodes().get(node)
    if cpus:
        os.sched_setaffinity(0, cpus & os.sched_getaffinity(0) or cpus)
    timer = CudaTimer(torch.device("cuda"))
    xs, est, graph = tiny_graph(timer)
    alone = quantiles(timer.replay(graph, est))[0] * 1e3
    prime(torch.device("cuda"))
    time.sleep(0.5)
    primed = quantiles(timer.replay(graph, est))[0] * 1e3
    cpu = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])  # field 39: the CPU it ran on last
    print(f"{node:>5} {cpu:>4} {min(x.data_ptr() for x in xs):>#16x} {alone:>8.2f} {primed:>8.2f}", flush=True)
    return 0


def levels() -> None:
    """Run 15: fresh processes time the tiny call at one of two levels about 7% apart (1.47 or 1.57 us alone,
    1.28 or 1.38 primed), and every serial fill's worker so far at the slow one. Twelve fresh processes, each on
    the cores of one NUMA node in turn (a graph's commands may be read from host memory near the process), with
    where their inputs lie in device memory."""
    nodes = sorted(numa_nodes()) or [-1]
    print(f"\nNUMA nodes: {len(nodes)}, the GPU's: {gpu_node()}\n"
          f"{'node':>5} {'cpu':>4} {'inputs at':>16} {'alone us':>8} {'primed':>8}")
    for i in range(12):
        subprocess.run([sys.executable, __file__, "--child-level", str(nodes[i % len(nodes)])], timeout=60)


def opened_after() -> None:
    """Run 14: in a parallel fill, about half the pairs timed 8-15% faster than serially, the same pairs' forward
    and step alike: a state of the worker that timed them. Run 6 (H200) found one context opened after a
    process's own enough for the fast state, kept after it closes; run 12 (H100) found 1-4 idle contexts
    beside a process not enough and 12 enough. If the state is the number of contexts opened after a process's
    own, a fill's 12 workers, their contexts opened in turn, are about half in each. Each row is a fresh
    process: its tiny call alone, then after N contexts opened and closed."""
    print(f"\n{'tiny call (us), fresh process':<28} {'alone':>10} {'after':>10} {'recapture':>10} {'open s':>8}")
    for n, way in ((0, "many"), (1, "many"), (4, "many"), (12, "many"), (4, "one"), (12, "one"), (0, "many")):
        subprocess.run([sys.executable, __file__, "--child", str(n), way], timeout=60)


def beside_load(timer: CudaTimer) -> None:
    """Run 15: a serial fill beside 11 idle contexts held by bare driver-API helpers (a fill feature tried and
    taken out again) still timed tiny calls 12-19% slower than a 12-worker fill. What else a parallel fill's timing has beside
    it: contexts of processes that imported torch (run 12's 12 idle ones: 1.25 against 1.38 us), and busy
    CPU cores with the timing thread pinned to a kept one (lane.keep_a_core_for_timing)."""
    _, est, graph = tiny_graph(timer)
    prime(torch.device("cuda"))
    print(f"\n{'tiny call (us), primed, beside':<44} {'median':>8} {'q20-q80':>14}")

    def row(label: str) -> None:
        time.sleep(0.5)
        med, q20, q80 = quantiles(timer.replay(graph, est))
        print(f"{label:<44} {med * 1e3:>8.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}", flush=True)

    row("nothing")
    held = [subprocess.Popen([sys.executable, "-c", _OPEN, "1", "many"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True) for _ in range(11)]
    try:
        n = sum(proc.stdout.readline().strip() == "ready" for proc in held)
        row(f"{n} idle driver-API contexts")
    finally:
        for proc in held:
            proc.communicate("\n")
    idle = [idle_context() for _ in range(11)]
    try:
        row("11 idle torch processes")
    finally:
        for proc in idle:
            proc.kill()
    row("nothing, after they exit")
    cores = sorted(os.sched_getaffinity(0))
    spin = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{c}}})\nwhile True: pass"])
            for c in cores[1:]]
    try:
        row(f"{len(spin)} busy cores, this process anywhere")
        os.sched_setaffinity(0, {cores[0]})
        row(f"{len(spin)} busy cores, this process on a free one")
    finally:
        os.sched_setaffinity(0, set(cores))
        for proc in spin:
            proc.kill()
    row("nothing, at the end")
    graph.reset()


def placement(timer: CudaTimer) -> None:
    """Run 15: processes differ by about 7% in the tiny call's time (fresh ones 1.47 or 1.57 us, primed 1.28 or
    1.38), and nothing beside a primed one (idle contexts, busy cores) moved it. Whether where its inputs lie
    in device memory does: the same call on inputs allocated after 0, 2, 8 and 40 GiB of other tensors, each
    set held while the next is timed, in this one process."""
    prime(torch.device("cuda"))
    print(f"\n{'tiny call (us), primed, inputs after':<44} {'median':>8} {'q20-q80':>14}")
    held = []
    for gib in (0, 2, 8, 40, 0):
        if gib:
            held.append(torch.empty(gib * 2**30, dtype=torch.uint8, device="cuda"))
        xs, est, graph = tiny_graph(timer)
        med, q20, q80 = quantiles(timer.replay(graph, est))
        where = min(x.data_ptr() for x in xs)
        print(f"{f'{sum(h.numel() for h in held) / 2**30:.0f} GiB held, inputs at {where:#x}':<44} "
              f"{med * 1e3:>8.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}", flush=True)
        graph.reset()
    held.clear()


def streams(timer: CudaTimer) -> None:
    """Whether a process's level (run 15: about 7% apart, fixed at its start) belongs to the process or to the
    stream its work is submitted on (each stream may get its own hardware channel): the same graph replayed
    on the default stream and on new streams of low and high priority, by turns, twice."""
    prime(torch.device("cuda"))
    _, est, graph = tiny_graph(timer)
    lo, hi = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") else (0, -1)
    made = [("default", torch.cuda.current_stream())]
    made += [(f"new {i}, priority {p}", torch.cuda.Stream(priority=p)) for i in range(4) for p in (lo, hi)]
    print(f"\n{'tiny call (us), primed, replayed on':<36} {'median':>8} {'q20-q80':>14} {'again':>8}")
    for label, stream in made:
        got = []
        for _ in range(2):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                got.append(quantiles(timer.replay(graph, est)))
            torch.cuda.current_stream().wait_stream(stream)
        (med, q20, q80), again = got[0], got[1][0]
        print(f"{label:<36} {med * 1e3:>8.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f} {again * 1e3:>8.2f}", flush=True)
    graph.reset()


_BUSY = """
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
for line in sys.stdin:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < float(line):
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
    print("done", flush=True)
"""


def decay(timer: CudaTimer, seconds: float, every: float = 5.0) -> None:
    """Run 15's agreement rows (rms_norm, one row, fp32): within one parallel worker and one case, torch and
    compile timed 12-15% faster than in a serial fill, fla and liger as serially, seconds apart; so the fast
    state is not the process's for good. Whether it fades with time, and what brings it back: a primed
    process (a helper holding its own context opened after it) times the tiny call every ``every`` seconds
    for ``seconds`` of nothing else; then right after the helper has kept the device busy for 2 s (another
    process's work, no context opened); then right after one more context is opened and closed."""
    prime(torch.device("cuda"))
    helper = subprocess.Popen([sys.executable, "-c", _BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    helper.stdout.readline()
    _, est, graph = tiny_graph(timer)
    print(f"\n{'tiny call (us), primed':<40} {'median':>8} {'q20-q80':>14}  after it: SM/mem/gfx/video MHz, "
          "P-state, clock event reasons")

    def rows(label: str, n: int) -> None:
        t0 = time.perf_counter()
        for i in range(n):
            med, q20, q80 = quantiles(timer.replay(graph, est))
            print(f"{f'{label}, {time.perf_counter() - t0:5.1f} s after':<40} {med * 1e3:>8.2f} "
                  f"{q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}  {nvml_state()}", flush=True)
            if i < n - 1:
                time.sleep(every)

    rows("the helper's context opened", max(1, int(seconds / every)))
    helper.stdin.write("2\n")
    helper.stdin.flush()
    helper.stdout.readline()
    rows("the helper busy for 2 s", 3)
    took = open_contexts(1, "many")
    rows(f"one more context opened ({took:.1f} s)", 3)
    helper.stdin.close()
    helper.wait(timeout=30)
    graph.reset()


def _new_torch_kernels() -> None:
    """First calls of torch kernels this process has not run: with lazy module loading, each loads its module."""
    x = torch.randn(1 << 16, device="cuda")
    for f in (torch.sort, torch.cumsum, torch.erfinv, torch.special.i0, torch.argsort, torch.logcumsumexp):
        f(x, 0) if f in (torch.cumsum, torch.logcumsumexp) else f(x)
    torch.cuda.synchronize()


def _triton_kernel() -> None:
    """A Triton kernel compiled (JIT) and launched: a new module, as every inductor or library kernel a fill warms."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x, n, k: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + i, tl.load(x + i, mask=i < n) * k, mask=i < n)
    x = torch.randn(1 << 16, device="cuda")
    scale[(64,)](x, x.numel(), time.time_ns() % 1000 + 2, BLOCK=1024)  # a fresh constexpr: compiled now
    torch.cuda.synchronize()


def _alloc_free() -> None:
    held = torch.empty(1 << 28, device="cuda")  # 1 GiB, then back to the driver
    del held
    torch.cuda.empty_cache()
    torch.cuda.synchronize()


def _graph_on_new_stream() -> None:
    timer = CudaTimer(torch.device("cuda"))
    _, est, graph = tiny_graph(timer)
    timer.replay(graph, est)
    graph.reset()


def _unprime() -> None:
    if not unprime(torch.device("cuda")):
        raise RuntimeError("device_state.unprime did not run")


def after_events(timer: CudaTimer) -> None:
    """What a fill's worker does between ``device_state.prime`` and its timings that the probes' processes never did,
    in one process, each from the primed state (another context opened just before) and followed by the tiny
    call, then again 2 s later: nothing (the control), first calls of new torch kernels (lazy module loading), a
    Triton kernel compiled and launched, 1 GiB allocated and given back to the driver, a graph captured on a new
    stream and destroyed, 16 new streams, and the fill's own ``device_state.unprime``. Run 15: every serial fill
    timed tiny calls as an unprimed process (0.0089 against 0.0078 ms for rms_norm fp32, the probe's 1.47 against
    1.29 us), though each primes before its first timing."""
    _, est, graph = tiny_graph(timer)

    def row(label: str) -> None:
        med, q20, q80 = quantiles(timer.replay(graph, est))
        print(f"{label:<48} {med * 1e3:>8.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}  {nvml_state()}", flush=True)

    print(f"\n{'tiny call (us), one process, after':<48} {'median':>8} {'q20-q80':>14}  SM/mem/gfx/video MHz, P-state, "
          "reasons")
    row("nothing (unprimed)")
    streams = []
    for label, event in (("nothing", lambda: None), ("new torch kernels' first calls", _new_torch_kernels),
                         ("a Triton kernel compiled, run", _triton_kernel),
                         ("1 GiB allocated, freed, cache emptied", _alloc_free),
                         ("a graph on a new stream, destroyed", _graph_on_new_stream),
                         ("16 new streams", lambda: streams.extend(torch.cuda.Stream() for _ in range(16))),
                         ("device_state.unprime", _unprime)):
        row(f"another context opened ({open_contexts(1, 'many'):.1f} s)")
        try:
            event()
        except Exception as e:  # noqa: BLE001 - say it, go on with the next
            label += f" ({type(e).__name__})"
        row(f"  then {label}")
        time.sleep(2.0)
        row("  and 2 s later")
    graph.reset()


def recovery(timer: CudaTimer) -> None:
    """How long the clock takes to come back after busy work: one replay of the tiny call (about 0.2 ms,
    too short to warm anything) after a second of matmuls and then DELAY ms idle, five times each. The
    delay after which it times as after a long idle is the settle a timed hold needs."""
    _, fns = tiny_calls()
    graph = timer.capture(fns, 1.0 / 112)
    print(f"\n{'tiny call after 1 s busy, then idle':<44} {'clock MHz':>10} {'median us':>10} {'min-max us':>14}")
    for delay_ms in (0, 1, 3, 10, 30, 100, 300, 1000):
        per_call, mhz = [], []
        for _ in range(5):
            busy(1.0)
            time.sleep(delay_ms / 1e3)
            clock = clocks()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            graph.graph.replay()
            e.record()
            torch.cuda.synchronize()
            per_call.append(s.elapsed_time(e) / graph.calls * 1e3)
            mhz.append(clock[0] if clock else 0)
        med = sorted(per_call)[2]
        print(f"{f'{delay_ms} ms idle':<44} {sorted(mhz)[2]:>10} {med:>10.2f} {min(per_call):>6.2f}-{max(per_call):<6.2f}",
              flush=True)
    graph.reset()


def suspects(timer: CudaTimer) -> None:
    """The tiny call again under the two other differences between a serial and a parallel fill: how
    many calls one replay makes (sized from an estimate taken beside other workers' trials, which
    reads high), and other processes holding CUDA contexts on the device while it times."""
    _, fns = tiny_calls()
    print(f"\n{'tiny call, variant':<44} {'median us':>10} {'q20-q80 us':>14}")
    for calls in (16, 112, 1008):  # est so that capture() unrolls this many calls
        graph = timer.capture(fns, 1.0 / calls)
        med, q20, q80 = quantiles(timer.replay(graph, 1.0 / calls))
        graph.reset()
        print(f"{f'{graph.calls} calls per replay':<44} {med * 1e3:>10.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}", flush=True)
    idle: list = []
    try:
        while len(idle) < 12:
            idle.append(idle_context())
        graph = timer.capture(fns, 1.0 / 112)
        med, q20, q80 = quantiles(timer.replay(graph, 1.0 / 112))
        graph.reset()
        print(f"{'112 calls, 12 idle CUDA contexts beside':<44} {med * 1e3:>10.2f} {q20 * 1e3:>6.2f}-{q80 * 1e3:<6.2f}")
    finally:
        for proc in idle:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
