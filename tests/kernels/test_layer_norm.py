import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.layer_norm import layer_norm

from .check import agree


def independent(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("present", [(), ("bias",)])
@pytest.mark.parametrize("dims,batch,eps", [({"normalized_shape": 64}, (3,), 1e-5),
                                            ({"normalized_shape": 129}, (), 1e-6),
                                            ({"normalized_shape": 17}, (2, 5), 1e-5)])
def test_matches_fp64(dims, batch, eps, present, dtype):
    agree(layer_norm, independent, Case(dims, batch, dtype, {"eps": eps}, present))


def test_large_offset_is_stable():
    # A large common offset: a one-pass E[x^2] - E[x]^2 variance would cancel catastrophically in fp32.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 257, generator=g, dtype=torch.float64) + 1e4
    w, b = torch.randn(257, generator=g, dtype=torch.float64), torch.randn(257, generator=g, dtype=torch.float64)
    got = layer_norm(x.float(), w.float(), b.float())
    want = F.layer_norm(x, (257,), w, b, 1e-5)
    assert (got.double() - want).abs().max() < 1e-2


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="normalized_shape"):
        layer_norm(torch.randn(2, 8), torch.randn(8), torch.randn(7))
