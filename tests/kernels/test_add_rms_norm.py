import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.add_rms_norm import add_rms_norm

from .check import agree


def independent(x, residual, weight, eps):
    h = x + residual
    n = h.shape[-1]
    return h / torch.sqrt((h * h).sum(-1, keepdim=True) / n + eps) * weight, h


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch,eps", [({"normalized_shape": 64}, (3,), 1e-6),
                                            ({"normalized_shape": 129}, (), 1e-5),
                                            ({"normalized_shape": 17}, (2, 5), 1e-6)])
def test_matches_fp64(dims, batch, eps, dtype):
    agree(add_rms_norm, independent, Case(dims, batch, dtype, {"eps": eps}))


def test_residual_sum_in_native_dtype():
    g = torch.Generator().manual_seed(0)
    x, r = (torch.randn(4, 33, generator=g).to(torch.bfloat16) for _ in range(2))
    w = torch.randn(33, generator=g).to(torch.bfloat16)
    x0, r0 = x.clone(), r.clone()
    y, h = add_rms_norm(x, r, w)
    assert h.dtype == torch.bfloat16 and torch.equal(h, x + r)  # the bf16 sum, bit for bit
    hf = h.float()
    want = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)
    assert torch.equal(y, want)  # normalizes the stored (rounded) residual, not the exact sum
    assert torch.equal(x, x0) and torch.equal(r, r0)


def test_wrong_shape_names_dim():
    x, r = torch.randn(2, 8), torch.randn(2, 8)
    with pytest.raises(DispatchError, match="normalized_shape"):
        add_rms_norm(x, r, torch.randn(9))
    with pytest.raises(DispatchError, match=r"'\.\.\.'"):
        add_rms_norm(x, torch.randn(3, 8), torch.randn(8))
