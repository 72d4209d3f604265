import math

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


# -- masked vocabularies: entries with target probability 0 contribute 0 and no gradient ----------

@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_masked_vocabulary_is_finite_and_matches_fp64(log_target, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.log_softmax(torch.randn(5, 10, generator=g, dtype=torch.float64), -1)
    log_p = torch.log_softmax(torch.randn(5, 10, generator=g, dtype=torch.float64), -1)
    x[:, :2] = float("-inf")  # masked in both
    log_p[:, :3] = float("-inf")  # the target masks one entry more
    want = sum(math.exp(lp) * (lp - lx) for xr, pr in zip(x.tolist(), log_p.tolist())
               for lx, lp in zip(xr, pr) if lp > float("-inf")) / 5
    target = log_p if log_target else log_p.exp()
    xi, ti = x.to(dtype).requires_grad_(), target.to(dtype).requires_grad_()
    got = kl_div.reference(xi, ti, "batchmean", log_target)
    got.backward()
    assert got.item() == pytest.approx(want, rel=2e-2 if dtype == torch.bfloat16 else 1e-6)
    assert torch.isfinite(xi.grad).all() and torch.isfinite(ti.grad).all()
    assert (xi.grad[:, :3] == 0).all()
    pointwise = kl_div.reference(xi, ti, "none", log_target)
    assert not pointwise.isnan().any() and (pointwise[:, :3] == 0).all()
