"""The compile backend: torch.compile of the reference, compiled per signature."""

import pytest
import torch
from torch._dynamo.utils import counters

from popcorn.core.compiled import Compiled


def f(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def test_one_compiled_function_falls_back_past_its_recompile_limit():
    # The failure mode Compiled exists to avoid: one torch.compile wrapper stops compiling.
    torch._dynamo.reset()
    counters.clear()
    naive = torch.compile(f, backend="eager", dynamic=False)
    for n in range(1, 12):
        naive(torch.randn(2, n))
    assert counters["frames"]["ok"] < 11


def test_every_signature_runs_compiled_code():
    torch._dynamo.reset()
    counters.clear()
    c = Compiled(f, backend="eager", dynamic=False)
    for n in range(1, 12):
        c(x=torch.randn(2, n), eps=1e-6)
    assert counters["frames"]["ok"] == 11
    assert counters["stats"]["unique_graphs"] == 11
    # the same signature again reuses its compiled function: no new frame
    c(x=torch.randn(2, 5), eps=1e-6)
    assert counters["frames"]["ok"] == 11
    assert len(c.cache) == 11


def test_later_signatures_compile_with_static_shapes():
    # dynamo's automatic-dynamic state outlives a code copy; later signatures must not turn symbolic
    torch._dynamo.reset()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append([type(a).__name__ for a in example_inputs])
        return gm.forward

    c = Compiled(f, backend=capture)
    for n in (8, 16, 32):
        c(x=torch.randn(4, n))
    assert graphs == [["Tensor"]] * 3


@pytest.mark.slow
def test_compile_backend_agrees_with_the_reference_on_cpu():
    from popcorn.kernels import rms_norm

    for shape, dtype in [((4, 33), torch.float32), ((2, 3, 64), torch.bfloat16)]:
        x = torch.randn(shape, dtype=dtype, requires_grad=True)
        w = torch.randn(shape[-1], dtype=dtype, requires_grad=True)
        want = rms_norm(x, w)
        got = rms_norm(x, w, backend="compile")
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        g = torch.randn_like(want)
        gw = torch.autograd.grad(want, (x, w), g)
        gg = torch.autograd.grad(got, (x, w), g)
        for a, b in zip(gg, gw):
            torch.testing.assert_close(a, b, atol=4 * tol, rtol=4 * tol)
