import math

import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.gelu import gelu

from .check import agree


def independent(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dims,batch", [({"hidden": 64}, (3,)), ({"hidden": 129}, ()), ({"hidden": 17}, (2, 5))])
def test_matches_fp64(dims, batch, dtype, approximate):
    agree(gelu, independent, Case(dims, batch, dtype, {"approximate": approximate}))


def test_tails_and_approximation_gap():
    x = torch.tensor([-20.0, -3.0, 0.0, 3.0, 20.0], dtype=torch.float64)
    exact, approx = gelu(x), gelu(x, approximate="tanh")
    torch.testing.assert_close(exact[[0, 2, 4]], torch.tensor([0.0, 0.0, 20.0], dtype=torch.float64))
    gap = (exact - approx).abs().max().item()
    assert 0 < gap < 1e-3  # the tanh form is an approximation, not the erf form


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="hidden"):
        gelu(torch.randn(()))
