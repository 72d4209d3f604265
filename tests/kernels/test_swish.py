import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.swish import swish

from .check import agree


def independent(x):
    return F.silu(x)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"hidden": 64}, (3,)), ({"hidden": 129}, ()), ({"hidden": 17}, (2, 5))])
def test_matches_fp64(dims, batch, dtype):
    agree(swish, independent, Case(dims, batch, dtype))


def test_large_magnitudes_stay_finite():
    x = torch.tensor([-1e4, -100.0, 0.0, 100.0, 6e4], dtype=torch.float16)
    out = swish(x)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert out[0] == 0 and out[2] == 0 and out[4] == x[4]


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="hidden"):
        swish(torch.tensor(1.0))
