import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.group_norm import group_norm

from .check import agree


def independent(x, weight, bias, num_groups, eps):
    return F.group_norm(x, num_groups, weight, bias, eps)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("present", [(), ("bias",)])
@pytest.mark.parametrize("dims,num_groups", [({"batch": 2, "channels": 64, "width": 17}, 32),
                                             ({"batch": 1, "channels": 21, "width": 33}, 1),
                                             ({"batch": 3, "channels": 16, "width": 8}, 8)])
def test_matches_fp64(dims, num_groups, present, dtype):
    agree(group_norm, independent, Case(dims, (), dtype, {"num_groups": num_groups}, present))


def test_one_channel_per_group_is_instance_norm():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 33, generator=g, dtype=torch.float64)
    w, b = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    want = F.instance_norm(x, weight=w, bias=b, eps=1e-5)
    torch.testing.assert_close(group_norm(x, w, b, num_groups=8), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("channels,num_groups", [(17, 32), (64, 3)])
def test_indivisible_channels_raise(channels, num_groups):
    x, w = torch.randn(2, channels, 5), torch.randn(channels)
    with pytest.raises(ValueError, match=rf"channels={channels}.*num_groups={num_groups}"):
        group_norm(x, w, num_groups=num_groups)


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="channels"):
        group_norm(torch.randn(2, 64, 5), torch.randn(32))
    with pytest.raises(DispatchError, match="batch channels width"):
        group_norm(torch.randn(64, 5), torch.randn(64))
