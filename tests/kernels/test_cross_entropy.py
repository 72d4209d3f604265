import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.cross_entropy import cross_entropy

from .check import agree


def independent(logits, target, ignore_index, label_smoothing, reduction):
    return F.cross_entropy(logits.double(), target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,args", [
    ({"tokens": 16, "vocab": 64}, {"reduction": "mean", "label_smoothing": 0.0}),
    ({"tokens": 17, "vocab": 101}, {"reduction": "sum", "label_smoothing": 0.1}),
    ({"tokens": 9, "vocab": 7}, {"reduction": "none", "label_smoothing": 0.1}),
    ({"tokens": 33, "vocab": 27}, {"reduction": "mean", "label_smoothing": 0.1}),
    ({"tokens": 8, "vocab": 65}, {"reduction": "none", "label_smoothing": 0.0}),
    ({"tokens": 3, "vocab": 17}, {"reduction": "sum", "label_smoothing": 0.0}),
])
def test_matches_fp64(dims, args, dtype):
    agree(cross_entropy, independent, Case(dims, (), dtype, args))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_custom_ignore_index(reduction):
    case = Case({"tokens": 37, "vocab": 16}, (), "float32", {"ignore_index": 3, "reduction": reduction,
                                                             "label_smoothing": 0.1})
    assert (make_inputs(cross_entropy, case)["target"] == 3).any()
    agree(cross_entropy, independent, case)


def test_domain_ignores_some_rows_never_all():
    target = make_inputs(cross_entropy, Case({"tokens": 512, "vocab": 33}))["target"]
    frac = (target == -100).float().mean().item()
    assert 0.02 < frac < 0.25
    kept = target[target != -100]
    assert kept.min() >= 0 and kept.max() < 33
    for seed in range(50):  # tiny token counts must still keep a row
        t = make_inputs(cross_entropy, Case({"tokens": 2, "vocab": 3}), seed=seed)["target"]
        assert (t != -100).any()


def test_ignored_rows_are_zero_with_zero_grad():
    logits = torch.randn(6, 11, requires_grad=True)
    target = torch.tensor([1, -100, 4, -100, 10, 0])
    loss = cross_entropy(logits, target, reduction="none", label_smoothing=0.1)
    assert torch.equal(loss[[1, 3]], torch.zeros(2))
    loss.sum().backward()
    assert torch.equal(logits.grad[[1, 3]], torch.zeros(2, 11))
    mean = cross_entropy(logits, target, label_smoothing=0.1)
    torch.testing.assert_close(mean, loss.sum() / 4)


def test_all_ignored_mean_is_nan_like_torch():
    logits = torch.randn(4, 5)
    target = torch.full((4,), -100)
    assert torch.isnan(cross_entropy(logits, target))
    assert torch.isnan(F.cross_entropy(logits, target))
    assert cross_entropy(logits, target, reduction="sum") == 0


def test_half_logits_give_fp32_loss():
    logits = torch.randn(5, 9).bfloat16()
    assert cross_entropy(logits, torch.arange(5)).dtype == torch.float32


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="tokens"):
        cross_entropy(torch.randn(4, 7), torch.zeros(5, dtype=torch.long))
