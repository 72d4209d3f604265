import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.swiglu import swiglu

from .check import agree


def independent(gate, up):
    return gate / (1 + torch.exp(-gate)) * up


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"intermediate": 64}, (3,)), ({"intermediate": 129}, ()),
                                        ({"intermediate": 17}, (2, 5))])
def test_matches_fp64(dims, batch, dtype):
    agree(swiglu, independent, Case(dims, batch, dtype))


def test_large_magnitude_gate_saturates():
    gate = torch.tensor([-100.0, -30.0, 0.0, 30.0, 100.0], dtype=torch.bfloat16)
    up = torch.full_like(gate, 2.0)
    out = swiglu(gate, up)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), torch.tensor([0.0, 0.0, 0.0, 60.0, 200.0]), atol=1e-6, rtol=1e-2)


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="intermediate"):
        swiglu(torch.randn(2, 8), torch.randn(2, 9))
