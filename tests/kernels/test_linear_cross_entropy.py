import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.cross_entropy import cross_entropy
from popcorn.kernels.linear_cross_entropy import linear_cross_entropy

from .check import agree


def independent(x, weight, target, bias, ignore_index, label_smoothing, reduction):
    logits = torch.einsum("th,vh->tv", x.double(), weight.double())
    if bias is not None:
        logits = logits + bias.double()
    return F.cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                           reduction=reduction)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,args,present", [
    ({"tokens": 16, "hidden": 16, "vocab": 64}, {"reduction": "mean", "label_smoothing": 0.0}, ()),
    ({"tokens": 17, "hidden": 21, "vocab": 101}, {"reduction": "sum", "label_smoothing": 0.1}, ("bias",)),
    ({"tokens": 9, "hidden": 8, "vocab": 27}, {"reduction": "none", "label_smoothing": 0.1}, ()),
    ({"tokens": 33, "hidden": 17, "vocab": 65}, {"reduction": "mean", "label_smoothing": 0.1}, ("bias",)),
    ({"tokens": 8, "hidden": 16, "vocab": 33}, {"reduction": "none", "label_smoothing": 0.0}, ("bias",)),
    ({"tokens": 3, "hidden": 8, "vocab": 17}, {"reduction": "sum", "label_smoothing": 0.0}, ()),
])
def test_matches_fp64(dims, args, present, dtype):
    agree(linear_cross_entropy, independent, Case(dims, (), dtype, args, present))


def test_custom_ignore_index():
    case = Case({"tokens": 37, "hidden": 16, "vocab": 16}, (), "float32",
                {"ignore_index": 5, "reduction": "mean", "label_smoothing": 0.1}, ("bias",))
    agree(linear_cross_entropy, independent, case)


def test_matches_cross_entropy_on_native_logits_and_ignored_rows_get_no_grad():
    x = torch.randn(6, 16, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(11, 16, dtype=torch.bfloat16)
    b = torch.randn(11, dtype=torch.bfloat16)
    target = torch.tensor([1, -100, 4, -100, 10, 0])
    loss = linear_cross_entropy(x, w, target, b, reduction="none")
    assert loss.dtype == torch.float32
    assert torch.equal(loss, cross_entropy(x @ w.T + b, target, reduction="none"))  # bf16 logits, then fp32 loss
    loss.sum().backward()
    assert torch.equal(x.grad[[1, 3]], torch.zeros(2, 16, dtype=torch.bfloat16))


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="hidden"):
        linear_cross_entropy(torch.randn(4, 8), torch.randn(10, 9), torch.zeros(4, dtype=torch.long))
    with pytest.raises(DispatchError, match="vocab"):
        linear_cross_entropy(torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long),
                             torch.randn(11))
