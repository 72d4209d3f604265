import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.attn import attn
from popcorn.kernels.attn_varlen import attn_varlen

from .check import agree


def independent(q, k, v, cu_seqlens, causal, scale):
    # one attention over the whole pack with a block-diagonal (and causal) mask
    total = q.shape[0]
    seg = torch.bucketize(torch.arange(total), cu_seqlens[1:].long(), right=True)
    mask = seg[:, None] == seg[None, :]
    if causal:
        mask &= torch.ones(total, total, dtype=torch.bool).tril()
    idx = torch.arange(q.shape[1]) // (q.shape[1] // k.shape[1])
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k[:, idx].transpose(0, 1), v[:, idx].transpose(0, 1),
                                         attn_mask=mask, scale=scale)
    return out.transpose(0, 1)


CASES = [
    ({"total": 17, "q_heads": 4, "kv_heads": 2, "head_dim": 16, "boundaries": 4}, True, None),
    ({"total": 9, "q_heads": 4, "kv_heads": 1, "head_dim": 8, "boundaries": 2}, False, 0.125),
    ({"total": 33, "q_heads": 3, "kv_heads": 3, "head_dim": 24, "boundaries": 6}, True, 0.125),
    ({"total": 3, "q_heads": 2, "kv_heads": 1, "head_dim": 8, "boundaries": 6}, False, None),  # more seqs than tokens
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,causal,scale", CASES)
def test_matches_fp64(dims, causal, scale, dtype):
    agree(attn_varlen, independent, Case(dims, (), dtype, {"causal": causal, "scale": scale}))


def test_cu_seqlens_domain():
    for total, boundaries in [(17, 4), (9, 2), (5, 5), (5, 6), (3, 9)]:
        args = make_inputs(attn_varlen, Case({"total": total, "q_heads": 2, "kv_heads": 1, "head_dim": 8,
                                              "boundaries": boundaries}, (), "float32"), seed=total)
        cu = args["cu_seqlens"]
        assert cu.dtype == torch.int32 and cu.shape == (boundaries,)
        assert cu[0] == 0 and cu[-1] == total
        lengths = cu.diff()
        nonempty = min(boundaries - 1, total)
        assert (lengths[:nonempty] > 0).all() and (lengths[nonempty:] == 0).all()


def test_each_sequence_matches_attn_alone():
    args = make_inputs(attn_varlen, Case({"total": 12, "q_heads": 4, "kv_heads": 2, "head_dim": 8, "boundaries": 4},
                                         (), "float64"))
    out = attn_varlen(**args)
    cu = args["cu_seqlens"].tolist()
    for s, e in zip(cu[:-1], cu[1:]):
        one = attn(*(args[n][s:e].transpose(0, 1)[None] for n in ("q", "k", "v")), is_causal=True)
        torch.testing.assert_close(out[s:e], one[0].transpose(0, 1))


def test_cu_seqlens_validated():
    q, k = torch.randn(6, 2, 8), torch.randn(6, 1, 8)
    for bad, what in [([1, 3, 6], "start at 0"), ([0, 3, 5], "end at total"), ([0, 4, 2, 6], "non-decreasing")]:
        with pytest.raises(ValueError, match=what):
            attn_varlen(q, k, k, torch.tensor(bad, dtype=torch.int32))
    out = attn_varlen(q, k, k, torch.tensor([0, 3, 3, 6], dtype=torch.int32))  # an empty sequence is fine
    assert out.shape == q.shape and torch.isfinite(out).all()


def test_gqa_mismatch_and_wrong_shape():
    q, k = torch.randn(6, 3, 8), torch.randn(6, 2, 8)
    with pytest.raises(ValueError, match=r"q_heads=3.*kv_heads=2"):
        attn_varlen(q, k, k, torch.tensor([0, 6], dtype=torch.int32))
    with pytest.raises(DispatchError, match="total"):
        attn_varlen(torch.randn(7, 2, 8), k, k, torch.tensor([0, 6], dtype=torch.int32))
    with pytest.raises(DispatchError, match="cu_seqlens"):
        attn_varlen(q, k, k, torch.tensor([0.0, 6.0]))
