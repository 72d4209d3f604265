import math

import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.geglu import geglu

from .check import agree


def independent(gate, up, approximate):
    if approximate == "tanh":
        g = 0.5 * gate * (1 + torch.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate**3)))
    else:
        g = 0.5 * gate * (1 + torch.erf(gate / math.sqrt(2)))
    return g * up


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("dims,batch", [({"intermediate": 64}, (3,)), ({"intermediate": 129}, ()),
                                        ({"intermediate": 17}, (2, 5))])
def test_matches_fp64(dims, batch, dtype, approximate):
    agree(geglu, independent, Case(dims, batch, dtype, {"approximate": approximate}))


def test_default_is_tanh():
    gate, up = torch.randn(4, 33, dtype=torch.float64), torch.randn(4, 33, dtype=torch.float64)
    assert torch.equal(geglu(gate, up), geglu(gate, up, approximate="tanh"))
    assert not torch.equal(geglu(gate, up), geglu(gate, up, approximate="none"))


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="intermediate"):
        geglu(torch.randn(3, 16), torch.randn(3, 17))
