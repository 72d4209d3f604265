import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.l2_norm import l2_norm

from .check import agree


def independent(x, eps):
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / torch.sqrt(norm * norm + eps)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch,eps", [({"hidden": 64}, (3,), 1e-6),
                                            ({"hidden": 129}, (), 1e-5),
                                            ({"hidden": 17}, (2, 5), 1e-6)])
def test_matches_fp64(dims, batch, eps, dtype):
    agree(l2_norm, independent, Case(dims, batch, dtype, {"eps": eps}))


def test_unit_norm_and_zero_rows():
    x = torch.randn(4, 65, dtype=torch.float64)
    x[1] = 0.0
    x.requires_grad_(True)
    y = l2_norm(x, eps=1e-12)
    norms = torch.linalg.vector_norm(y.detach(), dim=-1)
    torch.testing.assert_close(norms[[0, 2, 3]], torch.ones(3, dtype=torch.float64))
    assert torch.equal(y[1].detach(), torch.zeros(65, dtype=torch.float64))  # eps keeps a zero row finite
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_eps_is_added_to_squared_norm():
    # fla's convention: rsqrt(sum x^2 + eps), not x / max(||x||, eps) as F.normalize does.
    x = torch.full((1, 4), 1e-3, dtype=torch.float64)
    want = x / torch.sqrt(torch.tensor(4e-6 + 1e-5, dtype=torch.float64))
    torch.testing.assert_close(l2_norm(x, eps=1e-5), want)


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="hidden"):
        l2_norm(torch.tensor(1.0))
