import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.kernels.jsd import jsd

from .check import agree


def independent(input, target, shift_labels, beta, ignore_index):
    """Entropy form of the generalized JSD: H(M) - beta H(P) - (1 - beta) H(Q), looped over rows."""
    log_q, log_p = input.double(), target.double()
    rows = []
    for t in range(log_q.shape[0]):
        if shift_labels is not None and shift_labels[t] == ignore_index:
            continue
        if beta == 0.0:
            rows.append(F.kl_div(log_q[t], log_p[t], reduction="sum", log_target=True))
        elif beta == 1.0:
            rows.append(F.kl_div(log_p[t], log_q[t], reduction="sum", log_target=True))
        else:
            p, q = log_p[t].exp(), log_q[t].exp()
            m = beta * p + (1 - beta) * q
            rows.append(-(m * m.log()).sum() + beta * (p * log_p[t]).sum() + (1 - beta) * (q * log_q[t]).sum())
    if not rows:
        return log_q.sum() * 0
    return torch.stack(rows).sum() / len(rows)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,args,present", [
    ({"tokens": 16, "vocab": 64}, {"beta": 0.5}, ("shift_labels",)),
    ({"tokens": 17, "vocab": 101}, {"beta": 0.0}, ()),
    ({"tokens": 9, "vocab": 7}, {"beta": 1.0}, ("shift_labels",)),
    ({"tokens": 33, "vocab": 27}, {"beta": 0.5}, ()),
    ({"tokens": 8, "vocab": 33}, {"beta": 0.0}, ("shift_labels",)),
    ({"tokens": 3, "vocab": 17}, {"beta": 1.0}, ()),
])
def test_matches_fp64(dims, args, present, dtype):
    agree(jsd, independent, Case(dims, (), dtype, args, present))


def test_other_beta_and_ignore_index():
    agree(jsd, independent, Case({"tokens": 37, "vocab": 16}, (), "float32", {"beta": 0.3, "ignore_index": 2},
                                 ("shift_labels",)))


def test_ignored_rows_are_dropped():
    torch.manual_seed(0)
    log_q = torch.log_softmax(torch.randn(6, 9, dtype=torch.float64), -1)
    log_p = torch.log_softmax(torch.randn(6, 9, dtype=torch.float64), -1)
    labels = torch.tensor([1, -100, 4, -100, 8, 0])
    keep = labels != -100
    for beta in (0.5, 0.0, 1.0):
        torch.testing.assert_close(jsd(log_q, log_p, labels, beta=beta), jsd(log_q[keep], log_p[keep], beta=beta))
    assert jsd(log_q, log_p, torch.full((6,), -100)) == 0  # no kept rows: 0, as in Liger
    for beta in (0.5, 0.0, 1.0, 0.3):
        assert jsd(log_q, log_q, beta=beta).abs() < 1e-12


def test_symmetric_jsd_is_bounded_by_log2():
    torch.manual_seed(0)
    log_q = torch.log_softmax(5 * torch.randn(6, 9, dtype=torch.float64), -1)
    log_p = torch.log_softmax(5 * torch.randn(6, 9, dtype=torch.float64), -1)
    value = jsd(log_q, log_p)
    assert 0 < value <= torch.log(torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(value, jsd(log_p, log_q))


def test_half_inputs_give_fp32_0d_loss():
    x = torch.log_softmax(torch.randn(4, 6), -1).bfloat16()
    out = jsd(x, x.flip(0))
    assert out.dtype == torch.float32 and out.dim() == 0


def test_wrong_shape_names_dim():
    with pytest.raises(DispatchError, match="vocab"):
        jsd(torch.randn(4, 7), torch.randn(4, 8))
    with pytest.raises(DispatchError, match="tokens"):
        jsd(torch.randn(4, 7), torch.randn(4, 7), torch.zeros(5, dtype=torch.long))
