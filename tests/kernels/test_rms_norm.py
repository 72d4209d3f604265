import pytest
import torch

from popcorn.core import Case
from popcorn.kernels import rms_norm

from .check import agree


def independent(x, weight, eps):
    n = x.shape[-1]
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) / n + eps) * weight


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"normalized_shape": 64}, (3,)), ({"normalized_shape": 129}, ()),
                                        ({"normalized_shape": 17}, (2, 5))])
def test_matches_fp64(dims, batch, dtype):
    agree(rms_norm, independent, Case(dims, batch, dtype, {"eps": 1e-5}))
