import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.linear import linear

from .check import agree


def independent(input, weight, bias):
    out = (input.double().unsqueeze(-2) * weight.double()).sum(-1)
    return out if bias is None else out + bias.double()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch,present", [({"in_features": 32, "out_features": 8}, (16,), ()),
                                                ({"in_features": 17, "out_features": 19}, (3,), ("bias",)),
                                                ({"in_features": 64, "out_features": 3}, (2, 2), ("bias",)),
                                                ({"in_features": 8, "out_features": 5}, (), ())])
def test_matches_fp64(dims, batch, present, dtype):
    agree(linear, independent, Case(dims, batch, dtype, {}, present))


def test_a_drop_in_for_f_linear():
    x, w, b = torch.randn(2, 3, 7), torch.randn(5, 7), torch.randn(5)
    torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b))
    torch.testing.assert_close(linear(input=x, weight=w), F.linear(input=x, weight=w))
    with pytest.raises(DispatchError, match="in_features"):
        linear(x, torch.randn(7, 5))  # a (in, out) weight, as matmul takes it, names the mismatch
