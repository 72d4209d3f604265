"""Correctness verdicts: wrong, raising, lazy and correct implementations."""

import pytest
import torch

from popcorn.bench.compare import FLOORS, Gauge, check, compare
from popcorn.core import Case
from popcorn.core.inputs import make_inputs
from popcorn.kernels import rms_norm, softmax


def draw_for(op, case):
    return lambda trial: make_inputs(op, case, seed=trial)


def ref(x, weight, eps):
    return rms_norm.reference(x, weight, eps)


CASE = Case({"normalized_shape": 96}, (7,), "float32", {"eps": 1e-6})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("grad", [False, True])
def test_correct_implementation_passes(dtype, grad):
    def mine(x, weight, eps):  # a different but correct formulation, in native precision where it can be
        xf = x.float()
        return (xf / xf.pow(2).mean(-1, keepdim=True).add(eps).sqrt() * weight.float()).to(x.dtype)
    case = Case({"normalized_shape": 96}, (7,), dtype, {"eps": 1e-6})
    r = check(ref, mine, draw_for(rms_norm, case), trials=3, grad=grad)
    assert r.status == "pass", r.reason
    assert r.reps == 3 and set(r.fwd) == {"out0"}
    assert set(r.bwd) == ({"x", "weight"} if grad else set())
    g = r.fwd["out0"]
    assert g.err <= max(2 * g.budget, FLOORS[getattr(torch, dtype)] * g.scale)


def test_wrong_implementation_fails_with_a_readable_reason():
    def mine(x, weight, eps):
        return ref(x, weight, eps) * 1.01
    r = check(ref, mine, draw_for(rms_norm, CASE), trials=2, grad=False)
    assert r.status == "fail"
    assert r.reason.startswith("out0: err ") and "> max(2*budget" in r.reason


def test_wrong_gradient_fails_naming_the_input():
    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            ctx.save_for_backward(x, weight)
            ctx.eps = eps
            return ref(x, weight, eps)

        @staticmethod
        def backward(ctx, g):
            x, weight = ctx.saved_tensors
            with torch.enable_grad():
                xx, ww = x.detach().requires_grad_(), weight.detach().requires_grad_()
                gx, gw = torch.autograd.grad(ref(xx, ww, ctx.eps), (xx, ww), g)
            return gx, gw * 2, None  # the weight gradient is wrong
    r = check(ref, lambda x, weight, eps: Bad.apply(x, weight, eps), draw_for(rms_norm, CASE), trials=2, grad=True)
    assert r.status == "fail"
    assert "grad weight: err" in r.reason and "grad x" not in r.reason


def test_raising_implementation_is_a_crash():
    def mine(x, weight, eps):
        raise RuntimeError("CUDA error: misaligned address")
    r = check(ref, mine, draw_for(rms_norm, CASE), trials=2, grad=False)
    assert r.status == "crash"
    assert r.reason == "RuntimeError: CUDA error: misaligned address"


def test_a_library_that_does_not_import_is_an_error_not_a_crash():
    # quack's metadata installed without the CuTe DSL's `cutlass`: the environment's fault, measured again
    # once fixed (an error row is never reused), not a verdict on the kernel
    def mine(x, weight, eps):
        import cutlass_not_installed_here  # noqa: F401
    r = check(ref, mine, draw_for(rms_norm, CASE), trials=2, grad=False)
    assert r.status == "error"
    assert r.reason.startswith("import: ModuleNotFoundError: No module named 'cutlass_not_installed_here'")


def test_raising_reference_is_an_error_not_a_crash():
    def broken(x, weight, eps):
        raise ValueError("bad reference")
    r = check(broken, ref, draw_for(rms_norm, CASE), trials=1, grad=False)
    assert r.status == "error" and r.reason.startswith("reference: ValueError")


def test_out_of_memory_is_oom():
    def mine(x, weight, eps):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80 GiB")
    assert check(ref, mine, draw_for(rms_norm, CASE), trials=1, grad=False).status == "oom"


def test_output_the_candidate_never_wrote_fails():
    def lazy(x, weight, eps):
        out = torch.empty_like(x)
        half = x.shape[-1] // 2
        out[..., :half] = ref(x, weight, eps)[..., :half]  # the second half is never written
        return out
    r = check(ref, lazy, draw_for(rms_norm, CASE), trials=1, grad=False)
    assert r.status == "fail" and "non-finite" in r.reason


def test_poisoning_does_not_outlive_the_check():
    check(ref, ref, draw_for(rms_norm, CASE), trials=1, grad=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_structure_mismatch_fails():
    r = check(ref, lambda x, weight, eps: ref(x, weight, eps)[:-1], draw_for(rms_norm, CASE), trials=1, grad=False)
    assert r.status == "fail" and "shape" in r.reason
    r = check(ref, lambda x, weight, eps: (ref(x, weight, eps), x), draw_for(rms_norm, CASE), trials=1, grad=False)
    assert r.status == "fail" and "2 outputs" in r.reason


def test_missing_gradient_fails():
    r = check(ref, lambda x, weight, eps: ref(x, weight.detach(), eps), draw_for(rms_norm, CASE), trials=1, grad=True)
    assert r.status == "fail" and r.reason == "grad weight: missing"


def test_trials_draw_fresh_inputs():
    seen = []

    def mine(x):
        seen.append(x[0, 0].item())
        return softmax.reference(x)
    case = Case({"vocab": 33}, (4,), "float32")
    assert check(softmax.reference, mine, draw_for(softmax, case), trials=3, grad=False).status == "pass"
    assert len(set(seen)) == 3


def test_gauge_verdicts():
    g = Gauge(err=float("nan"), budget=0.0, scale=1.0)
    assert g.verdict(1e-3) == "err is non-finite"
    assert Gauge(err=3e-3, budget=2e-3, scale=1.0).verdict(1e-3) is None  # within 2 * budget
    assert Gauge(err=5e-3, budget=1e-3, scale=10.0).verdict(1e-3) is None  # within floor * scale
    assert Gauge(err=2e-2, budget=1e-3, scale=10.0).verdict(1e-3).startswith("err 0.02 >")


def test_compare_is_registry_free_and_times_both_sides():
    x, w = torch.randn(16, 64, requires_grad=True), torch.randn(64, requires_grad=True)

    def fast(x, weight):
        return ref(x, weight, 1e-6)

    def slow(x, weight):
        return rms_norm(x, weight)
    r = compare(fast, slow, {"x": x, "weight": w})
    assert r.status == "pass" and r.timer == "cpu"
    for k in ("fwd_ms", "bwd_ms", "step_ms", "ref_fwd_ms", "ref_bwd_ms", "host_us"):
        assert r.timing[k] > 0, k
    assert r.timing["fwd_q20_ms"] <= r.timing["fwd_ms"] <= r.timing["fwd_q80_ms"]


@pytest.mark.parametrize("dtype, wrong", [("bfloat16", torch.float32), ("float32", torch.float64)])
def test_a_wrong_output_dtype_fails_naming_the_output_and_both_dtypes(dtype, wrong):
    def mine(x, weight, eps):  # right values, wrong dtype: breaks the caller's memory and the next op
        return ref(x, weight, eps).to(wrong)
    case = Case({"normalized_shape": 96}, (7,), dtype, {"eps": 1e-6})
    r = check(ref, mine, draw_for(rms_norm, case), trials=2, grad=False)
    assert r.status == "fail"
    assert r.reason == f"out0: dtype {str(wrong).removeprefix('torch.')}, the reference {dtype}"


def test_a_declared_output_dtype_is_what_the_output_is_held_to():
    case = Case({"normalized_shape": 96}, (7,), "bfloat16", {"eps": 1e-6})

    def mine(x, weight, eps):
        return ref(x, weight, eps).float()
    declared = check(ref, mine, draw_for(rms_norm, case), trials=2, grad=False,
                     out_dtypes=lambda a: {0: torch.float32})
    assert declared.status == "pass", declared.reason
    wrong = check(ref, lambda **a: ref(**a), draw_for(rms_norm, case), trials=2, grad=False,
                  out_dtypes=lambda a: {0: torch.float32})
    assert wrong.status == "fail" and wrong.reason == "out0: dtype bfloat16, the reference float32 (declared by the backend)"


def test_registration_declares_output_dtypes_by_dtype_or_parameter():
    from popcorn.core import register_kernel
    from popcorn.core.shapes import Float

    @register_kernel(compile=False)
    def toy_dtype(x: Float["n"]) -> Float["..."]:
        """Toy loss.

        $$y = \\sum x$$
        """
        return x.float().sum()

    toy_dtype.register("quack", lambda x: x.sum(), out_dtypes={0: "x"})
    x = torch.randn(8, dtype=torch.bfloat16)
    assert toy_dtype["quack"].expected_dtypes({"x": x}) == {0: torch.bfloat16}
    with pytest.raises(ValueError, match="out_dtypes"):
        toy_dtype.register("liger", lambda x: x.sum(), out_dtypes={0: "y"})


def test_host_allocation_failures_are_oom():
    from popcorn.bench.compare import is_oom

    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 25769803776 bytes. Error code 12 (Cannot allocate memory)")
    assert is_oom(cpu) and is_oom(MemoryError()) and is_oom(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_oom(RuntimeError("shape mismatch"))


def test_gauges_fold_a_trials_outputs_at_once_with_the_same_semantics():
    from popcorn.bench.compare import _fold, _measure

    inf, nan = float("inf"), float("nan")
    truth = torch.tensor([1.0, -4.0, inf, nan], dtype=torch.float64)
    native = torch.tensor([1.0, -4.5, inf, nan])  # equal infinities and NaN against NaN count as no error
    exact, off, broken = Gauge(), Gauge(), Gauge()
    pending = []
    _measure(pending, exact, truth.float(), native, truth)
    _measure(pending, off, torch.tensor([1.25, -4.0, inf, nan]), native, truth)
    _measure(pending, broken, torch.tensor([nan, -4.0, inf, nan]), native, truth)
    _measure(pending, off, torch.tensor([1.0, -4.125, inf, nan]), native, truth)  # a later trial: the max stays
    _fold(pending)
    assert pending == []
    assert (exact.err, exact.budget, exact.scale) == (0.0, 0.5, 4.0)  # scale: the largest finite magnitude
    assert off.err == 0.25 and off.verdict(1e-3) is None  # within 2 * budget
    assert broken.err == inf and broken.verdict(1e-3) == "err is non-finite"  # NaN where the truth is a number
    empty = Gauge()
    _measure(pending, empty, torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.float64))
    _fold(pending)
    assert (empty.err, empty.budget, empty.scale) == (0.0, 0.0, 1.0)


def test_a_check_holds_the_shared_lane_once_for_all_its_trials_and_folds_every_trial(lane_supervisor):
    """Each hold of a parallel fill's worker may wait through another worker's timing: a check asks once,
    not once per trial; and every trial's error still reaches the verdict (a bad last trial fails)."""
    from popcorn.bench import lane

    def draw(trial):
        g = torch.Generator().manual_seed(trial)
        return {"x": torch.randn(64, generator=g)}

    def reference(x):
        return torch.tanh(x)

    def wrong_last(x):  # right on every trial but the last: the verdict must see trial 4
        return torch.tanh(x) + (0.5 if x.sum().item() == draw(4)["x"].sum().item() else 0.0)

    ok = check(reference, reference, draw, trials=5, grad=False)
    bad = check(reference, wrong_last, draw, trials=5, grad=False)
    assert ok.passed and ok.reps == 5
    assert not bad.passed and "out0: err 0.5" in bad.reason and abs(bad.fwd["out0"].err - 0.5) < 1e-6
    assert lane_supervisor.settled(4) == [("lane", lane.SHARED), ("lane", lane.RELEASE)] * 2
