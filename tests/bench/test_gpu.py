"""GPU-only harness checks: peak memory, timing stability, the graph timer."""

import pytest
import torch

from popcorn.bench.timing import measure
from popcorn.kernels import rms_norm

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytestmark = [pytest.mark.gpu, pytest.mark.skip(reason="needs a CUDA device")]


def test_small_rms_norm_peak_memory_is_its_working_set():
    x = torch.randn(16, 1376, dtype=torch.bfloat16, device="cuda")  # 22K elements
    w = torch.randn(1376, dtype=torch.bfloat16, device="cuda")
    timing, _ = measure(lambda **a: rms_norm.reference(**a), {"x": x, "weight": w, "eps": 1e-6}, False,
                        torch.device("cuda"))
    # output 43 KiB plus fp32 temporaries of ~86 KiB each: well under 1 MiB, never a timer's flush buffer
    assert 0 < timing["fwd_mem_mb"] < 1.0


@pytest.mark.parametrize("impl", ["torch", "compile"])
def test_forward_time_is_repeatable_in_one_process(impl):
    x = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
    fn = rms_norm[impl]
    args = {"x": x, "weight": w, "eps": 1e-6}
    a, timer = measure(lambda **k: fn.invoke(k), args, False, torch.device("cuda"))
    b, _ = measure(lambda **k: fn.invoke(k), args, False, torch.device("cuda"))
    assert timer == "cuda-graph"
    assert abs(b["fwd_ms"] / a["fwd_ms"] - 1) < 0.05, (a["fwd_ms"], b["fwd_ms"])


def test_a_graph_timed_backward_is_the_step_less_the_forward_beside_it():
    x = torch.randn(256, 4096, dtype=torch.float32, device="cuda", requires_grad=True)
    w = torch.randn(4096, dtype=torch.float32, device="cuda", requires_grad=True)
    timing, timer = measure(lambda **a: rms_norm.reference(**a), {"x": x, "weight": w, "eps": 1e-6}, True,
                            torch.device("cuda"))
    assert timer == "cuda-graph"
    # the median of differences, not the difference of medians: close, never equal by construction
    assert 0 < timing["bwd_ms"] < timing["step_ms"]
    assert abs(timing["bwd_ms"] / (timing["step_ms"] - timing["fwd_ms"]) - 1) < 0.1, timing
    assert timing["bwd_q20_ms"] <= timing["bwd_ms"] <= timing["bwd_q80_ms"]


def test_every_cuda_timing_carries_the_canary_of_its_hold():
    # the canary (a 4096x64 fp16 mul, graph-replayed) times in the samples' hold: a few microseconds a call on
    # any device that replays graphs, the same call for a graph-timed pair and an event-timed one
    small = {"x": torch.randn(16, 4096, device="cuda"), "weight": torch.randn(4096, device="cuda"), "eps": 1e-6}
    large = {"x": torch.randn(65536, 8192, device="cuda"), "weight": torch.randn(8192, device="cuda"), "eps": 1e-6}
    got = {}
    for name, args in (("small", small), ("large", large)):
        timing, timer = measure(lambda **a: rms_norm.reference(**a), args, False, torch.device("cuda"))
        got[name] = (timer, timing["canary_us"])
    assert got["small"][0] == "cuda-graph" and got["large"][0] == "cuda-events", got
    for _, us in got.values():
        assert 0.2 < us < 20, got
    assert abs(got["small"][1] / got["large"][1] - 1) < 0.3, got


def test_the_canary_repeats_within_the_states_margin_right_after_settle():
    # settle keeps a state by comparing canaries: two in a row, with nothing between, must agree within
    # STATES_APART or every hold would re-prime
    from popcorn.bench import device_state
    from popcorn.bench.timing import CudaTimer

    timer = CudaTimer(torch.device("cuda"))
    device_state.canary(timer)
    settled_us = device_state.settle(timer)
    again = [device_state.canary_us(timer) for _ in range(3)]
    assert all(abs(a / settled_us - 1) <= device_state.STATES_APART for a in again), (settled_us, again)


def test_unprime_takes_a_primed_process_back_to_the_slower_state():
    # run 16 (H100): a graph captured, replayed and destroyed took a primed process from 1.38 to 1.58 us a call;
    # the unprimed policy relies on it, the canary in every row shows whether a device has the two states at all
    from popcorn.bench import device_state
    from popcorn.bench.timing import CudaTimer

    timer = CudaTimer(torch.device("cuda"))
    device_state.canary(timer)
    assert device_state._open_context(timer.device) is None
    primed = device_state.canary_us(timer)
    assert device_state.unprime(timer.device) is True
    unprimed = device_state.canary_us(timer)
    assert unprimed > primed * (1 + device_state.STATES_APART), (primed, unprimed)
    assert torch.ones(1, device="cuda").add_(1).item() == 2.0  # the context still works after


def test_unwritten_output_fails_on_cuda():
    from popcorn.bench.compare import check

    def ref(x):
        return x * 2

    def lazy(x):
        out = torch.empty_like(x)
        out[: x.shape[0] // 2] = x[: x.shape[0] // 2] * 2
        return out
    r = check(ref, lazy, lambda t: {"x": torch.randn(64, 128, device="cuda")}, trials=2, grad=False)
    assert r.status == "fail" and "non-finite" in r.reason


def test_a_host_stall_inside_a_call_is_not_timed():
    # the device spins while the host enqueues a batch: a stall between a call's two kernels (another
    # worker compiling on the same cores) must not show up as device time
    import time

    from popcorn.bench.timing import CudaTimer, _spin_rate, quantiles

    assert _spin_rate(torch.device("cuda")) > 0
    x = torch.randn(1024, 1024, device="cuda")
    timer = CudaTimer(torch.device("cuda"))

    def call(stall: float):
        x.mul_(1.0)
        time.sleep(stall)
        x.add_(0.0)
    plain = quantiles(timer.events(lambda: call(0.0)))[0]
    stalled = quantiles(timer.events(lambda: call(0.0001)))[0]  # 0.1 ms per call, beside a ~0.01 ms call
    assert stalled < plain * 1.5 + 0.01, (plain, stalled)


def test_prime_opens_another_context_on_the_device():
    from popcorn.bench import device_state

    dev = torch.device("cuda", torch.cuda.current_device())
    torch.ones(1, device=dev)
    device_state._primed.discard(dev)
    assert device_state.prime(dev) is True


def test_graph_replays_read_live_inputs_after_the_capture_returns():
    # graphs are captured in one function and replayed in another: the input copies they read must outlive
    # the capture (freed, the allocator reuses their memory and a replayed gather reads garbage indices)
    import gc

    from popcorn.bench.timing import CudaTimer, Step

    timer = CudaTimer(torch.device("cuda"))
    logits = torch.randn(64, 1000, device="cuda")
    target = torch.randint(0, 1000, (64,), device="cuda")

    def pick(logits, target):
        return logits.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    steps = [Step(pick, {"logits": logits, "target": target}, False) for _ in range(3)]
    graph = timer.capture([s.forward for s in steps], 0.01)
    out = steps[0].forward()
    del steps
    gc.collect()
    junk = [torch.full((64,), 10**9, dtype=torch.int64, device="cuda") for _ in range(64)]  # reuse freed blocks
    graph.graph.replay()
    torch.cuda.synchronize()  # raises here when a replay gathered with a garbage index
    assert torch.equal(out, pick(logits, target)) and len(junk) == 64


def test_cross_entropy_reference_times_on_graphs_without_a_device_assert():
    from popcorn.bench.plan import case_plan
    from popcorn.core.inputs import make_inputs
    from popcorn.kernels import cross_entropy

    case = next(p.case for p in case_plan(cross_entropy, 80 * 2**30).cases if p.case.dims["tokens"] <= 8)
    args = make_inputs(cross_entropy, case, seed=0, device="cuda")
    timing, timer = measure(lambda **a: cross_entropy.reference(**a), args, True, torch.device("cuda"))
    torch.cuda.synchronize()
    assert timer == "cuda-graph" and timing["fwd_ms"] > 0 and timing["step_ms"] > 0


def test_an_empty_capture_is_refused_and_the_process_lives():
    # run 13: a captured graph that recorded nothing aborted its worker when destroyed (torch 2.11), a false
    # crash row for liger's cross entropy; such a graph is refused (timed by events) and never destroyed
    import gc
    import subprocess
    import sys

    code = ("import gc, torch\n"
            "from popcorn.bench.timing import CudaTimer\n"
            "t = CudaTimer(torch.device('cuda'))\n"
            "try:\n"
            "    t.capture([lambda: None], 0.01)\n"
            "except RuntimeError as e:\n"
            "    print('refused', e)\n"
            "gc.collect()\n"
            "print('alive')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    gc.collect()
    assert "refused" in out.stdout and "alive" in out.stdout, out.stderr[-2000:]
