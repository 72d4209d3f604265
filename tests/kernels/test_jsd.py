import math

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


# -- masked vocabularies, underflow, empty inputs: the truth stays finite where the math is -------

def _masked_pair(tokens=6, vocab=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    log_q = torch.log_softmax(torch.randn(tokens, vocab, generator=g, dtype=torch.float64), -1)
    log_p = torch.log_softmax(torch.randn(tokens, vocab, generator=g, dtype=torch.float64), -1)
    log_q[:, :2] = float("-inf")  # a vocabulary mask both distributions share
    log_p[:, :2] = float("-inf")
    log_p[:, 2] = float("-inf")  # and one only the teacher has
    return log_q, log_p


def _jsd_by_entries(log_q, log_p, beta):
    """fp64 over the entries with positive probability only, term by term in Python."""
    total = 0.0
    for q_row, p_row in zip(log_q.tolist(), log_p.tolist()):
        for lq, lp in zip(q_row, p_row):
            q, p = math.exp(lq), math.exp(lp)
            m = beta * p + (1 - beta) * q
            if beta == 0.0:
                total += p * (lp - lq) if p > 0 else 0.0
            elif beta == 1.0:
                total += q * (lq - lp) if q > 0 else 0.0
            else:
                total += (beta * p * (lp - math.log(m)) if p > 0 else 0.0) + \
                         ((1 - beta) * q * (lq - math.log(m)) if q > 0 else 0.0)
    return total / log_q.shape[0]


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_masked_vocabulary_is_finite_and_matches_fp64(beta, dtype):
    log_q, log_p = _masked_pair()
    want = _jsd_by_entries(log_q, log_p, beta)
    x, y = log_q.to(dtype).requires_grad_(), log_p.to(dtype).requires_grad_()
    got = jsd.reference(x, y, beta=beta)
    got.backward()
    assert math.isfinite(got.item()) and got.item() == pytest.approx(want, rel=2e-2 if dtype == torch.bfloat16 else 1e-5)
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
    assert (x.grad[:, :2] == 0).all() and (y.grad[:, :2] == 0).all()  # masked entries get no gradient


def test_reverse_kl_into_a_masked_teacher_entry_is_infinite_not_nan():
    log_q, log_p = _masked_pair()  # the student keeps mass where the teacher has none
    assert jsd.reference(log_q, log_p, beta=1.0).item() == float("inf")


def test_mixture_underflow_in_fp32_stays_finite_and_matches_fp64():
    g = torch.Generator().manual_seed(1)
    log_q = torch.log_softmax(torch.randn(4, 16, generator=g, dtype=torch.float64), -1)
    log_p = torch.log_softmax(torch.randn(4, 16, generator=g, dtype=torch.float64), -1)
    log_q[:, 3], log_p[:, 3] = -110.0, -120.0  # exp underflows to 0 in fp32: log(0) would be -inf
    log_q[:, 4], log_p[:, 4] = -130.0, -105.0
    want = _jsd_by_entries(log_q, log_p, 0.5)
    x, y = log_q.float().requires_grad_(), log_p.float().requires_grad_()
    got = jsd.reference(x, y, beta=0.5)
    got.backward()
    assert got.item() == pytest.approx(want, rel=1e-5)
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()


def test_no_rows_is_a_zero_loss():
    for labels in (None, torch.zeros(0, dtype=torch.int64)):
        out = jsd.reference(torch.zeros(0, 8), torch.zeros(0, 8), labels)
        assert out.item() == 0.0
