import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.kernels.matmul import matmul

from .check import agree


def independent(a, b):
    return (a.double().unsqueeze(-1) * b.double()).sum(-2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,batch", [({"rows": 16, "inner": 32, "cols": 8}, ()),
                                        ({"rows": 17, "inner": 17, "cols": 19}, (3,)),
                                        ({"rows": 1, "inner": 64, "cols": 3}, (2, 2))])
def test_matches_fp64(dims, batch, dtype):
    agree(matmul, independent, Case(dims, batch, dtype))


def test_native_dtype_and_batched_equals_per_matrix():
    a = torch.randn(2, 3, 5, 7).bfloat16()
    b = torch.randn(7, 4).bfloat16()
    out = matmul(a, b)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 3, 5, 4)
    torch.testing.assert_close(out[1, 2], a[1, 2] @ b)


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="inner"):
        matmul(torch.randn(4, 8), torch.randn(9, 3))
