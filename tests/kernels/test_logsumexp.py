import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.logsumexp import logsumexp

from .check import agree


def independent(x):
    m = x.amax(-1)
    return m + torch.log(torch.exp(x - m[..., None]).sum(-1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"vocab": 64}, (3,)), ({"vocab": 129}, ()), ({"vocab": 17}, (2, 5)),
                                        ({"vocab": 1}, (4,))])
def test_matches_fp64(dims, batch, dtype):
    agree(logsumexp, independent, Case(dims, batch, dtype))


def test_output_drops_last_dim_only():
    assert logsumexp(torch.randn(2, 3, 5)).shape == (2, 3)
    assert logsumexp(torch.randn(7)).shape == ()
    assert logsumexp.outputs[0].variadic and len(logsumexp.outputs[0].tokens) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_large_logits_and_masked_entries(dtype):
    x = torch.randn(3, 37, dtype=torch.float64)
    x[0] += 6e4 if dtype == torch.float16 else 1e30  # exp without max-subtraction would overflow
    x[1, ::2] = float("-inf")  # masked entries contribute nothing
    x0 = x.to(dtype)
    y = logsumexp(x0)
    assert y.dtype == dtype and torch.isfinite(y).all()
    want = independent(x0.double())
    assert ((y.double() - want).abs() <= 8e-3 * want.abs().clamp(min=1)).all()


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="vocab"):
        logsumexp(torch.tensor(1.0))
