import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.kl_div import kl_div

from .check import agree


def independent(input, target, reduction, log_target):
    x = input.double()
    if log_target:
        p, log_p = target.double().exp(), target.double()
    else:
        p, log_p = target.double(), target.double().log()
    pointwise = p * (log_p - x)
    rows, cols = x.shape
    if reduction == "none":
        return pointwise
    total = pointwise.sum()
    return {"sum": total, "mean": total / (rows * cols), "batchmean": total / rows}[reduction]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,args", [
    ({"tokens": 16, "vocab": 64}, {"reduction": "batchmean", "log_target": False}),
    ({"tokens": 17, "vocab": 101}, {"reduction": "sum", "log_target": True}),
    ({"tokens": 9, "vocab": 7}, {"reduction": "mean", "log_target": False}),
    ({"tokens": 3, "vocab": 27}, {"reduction": "none", "log_target": True}),
    ({"tokens": 8, "vocab": 33}, {"reduction": "none", "log_target": False}),
    ({"tokens": 33, "vocab": 17}, {"reduction": "batchmean", "log_target": True}),
])
def test_matches_fp64(dims, args, dtype):
    agree(kl_div, independent, Case(dims, (), dtype, args))


def test_domains_are_distributions():
    for log_target in (False, True):
        args = make_inputs(kl_div, Case({"tokens": 5, "vocab": 9}, (), "float64", {"log_target": log_target}))
        torch.testing.assert_close(args["input"].exp().sum(-1), torch.ones(5, dtype=torch.float64))
        p = args["target"].exp() if log_target else args["target"]
        torch.testing.assert_close(p.sum(-1), torch.ones(5, dtype=torch.float64))


def test_matches_torch_and_zero_target_contributes_zero():
    x = torch.log_softmax(torch.randn(4, 6, dtype=torch.float64), -1)
    p = torch.softmax(torch.randn(4, 6, dtype=torch.float64), -1)
    for reduction in ("batchmean", "sum", "mean", "none"):
        torch.testing.assert_close(kl_div(x, p.log(), reduction=reduction, log_target=True),
                                   torch.nn.functional.kl_div(x, p.log(), reduction=reduction, log_target=True))
    p[0, 0] = 0.0
    for reduction in ("batchmean", "sum", "mean", "none"):
        got = kl_div(x, p, reduction=reduction)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, torch.nn.functional.kl_div(x, p, reduction=reduction))
    assert kl_div(x, p, reduction="none")[0, 0] == 0


def test_half_inputs_give_fp32_loss():
    x = torch.log_softmax(torch.randn(4, 6), -1).half()
    assert kl_div(x, x.exp()).dtype == torch.float32


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="vocab"):
        kl_div(torch.randn(4, 7), torch.randn(4, 8))
