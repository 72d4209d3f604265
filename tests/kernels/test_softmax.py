import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.softmax import softmax

from .check import agree


def independent(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"vocab": 64}, (3,)), ({"vocab": 129}, ()), ({"vocab": 17}, (2, 5)),
                                        ({"vocab": 1}, (4,))])
def test_matches_fp64(dims, batch, dtype):
    agree(softmax, independent, Case(dims, batch, dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_large_logits_and_masked_entries(dtype):
    x = torch.randn(3, 37, dtype=torch.float64) * 3
    x[0] += 6e4 if dtype == torch.float16 else 1e30  # huge shift: exp without max-subtraction would overflow
    x[1, ::2] = float("-inf")  # masked entries get exactly zero probability
    x0 = x.to(dtype)
    y = softmax(x0)
    assert y.dtype == dtype and torch.isfinite(y).all()
    assert torch.equal(y[1, ::2], torch.zeros_like(y[1, ::2]))
    torch.testing.assert_close(y.double().sum(-1), torch.ones(3, dtype=torch.float64), atol=2e-2, rtol=0)
    torch.testing.assert_close(y.double(), independent(x0.double()), atol=8e-3, rtol=0)


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="vocab"):
        softmax(torch.tensor(1.0))
