"""GPU-only dispatch checks: CUDA calls through popcorn agree with the reference, eager and compiled."""

import pytest
import torch

import popcorn
from popcorn.kernels import rms_norm, softmax

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytestmark = [pytest.mark.gpu, pytest.mark.skip(reason="needs a CUDA device")]


def _inputs(dtype=torch.bfloat16):
    torch.manual_seed(0)
    x = torch.randn(8, 4096, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=dtype, requires_grad=True)
    return x, w


@pytest.mark.parametrize("backend", [None, "torch", "compile"])
def test_cuda_call_matches_reference_with_gradients(backend):
    x, w = _inputs()
    rx, rw = (t.detach().clone().requires_grad_() for t in (x, w))
    got = rms_norm(x, w, backend=backend) if backend else rms_norm(x, w)
    want = rms_norm.reference(rx, rw)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    g = torch.randn_like(want)
    got.backward(g)
    want.backward(g)
    torch.testing.assert_close(x.grad, rx.grad, atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(w.grad.float(), rw.grad.float(), atol=0.5, rtol=5e-2)  # a 8-row reduction in bf16


def test_inductor_fullgraph_on_cuda():
    x, w = _inputs(torch.float32)

    def f(x, w):
        return softmax(rms_norm(x, w) * 0.5)

    want = f(x.detach(), w.detach())
    got = torch.compile(f, fullgraph=True)(x.detach(), w.detach())
    torch.testing.assert_close(got, want)


def test_explain_names_this_device():
    x, w = _inputs()
    text = popcorn.explain(rms_norm, x.detach(), w.detach())
    assert text.startswith("runs ")
    # it cites a record of this GPU (or a sibling, by name), or says there is none; never CPU evidence
    assert " on cpu:" not in text and (" on NVIDIA" in text or "no evidence" in text), text
