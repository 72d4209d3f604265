import pytest
import torch
import torch.nn.functional as F

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.attn import attn

from .check import TOL, agree


def independent(q, k, v, is_causal, scale):
    # q head h reads kv head h // group (consecutive q heads share one kv head)
    group = q.shape[1] // k.shape[1]
    idx = torch.arange(q.shape[1]) // group
    return F.scaled_dot_product_attention(q, k[:, idx], v[:, idx], is_causal=is_causal, scale=scale)


CASES = [
    ({"batch": 2, "q_heads": 4, "kv_heads": 2, "seq": 9, "head_dim": 16}, True, None),
    ({"batch": 1, "q_heads": 4, "kv_heads": 1, "seq": 17, "head_dim": 32}, False, 0.125),
    ({"batch": 2, "q_heads": 3, "kv_heads": 3, "seq": 5, "head_dim": 24}, True, 0.125),
    ({"batch": 1, "q_heads": 2, "kv_heads": 2, "seq": 1, "head_dim": 8}, False, None),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,causal,scale", CASES)
def test_matches_fp64(dims, causal, scale, dtype):
    agree(attn, independent, Case(dims, (), dtype, {"is_causal": causal, "scale": scale}))


def test_causal_first_row_reads_only_first_value():
    args = make_inputs(attn, Case({"batch": 1, "q_heads": 4, "kv_heads": 2, "seq": 6, "head_dim": 8}, (), "float64",
                                  {"is_causal": True}))
    out = attn(**args)
    torch.testing.assert_close(out[:, :, 0], args["v"].repeat_interleave(2, dim=1)[:, :, 0])
    # the last row sees everything: causal and full attention agree there, and nowhere else in general
    full = attn(**{**args, "is_causal": False})
    torch.testing.assert_close(out[:, :, -1], full[:, :, -1])
    assert not torch.allclose(out[:, :, 1], full[:, :, 1])


def test_gqa_groups_consecutive_q_heads():
    # kv head j must serve q heads 2j and 2j+1 (repeat_interleave), not j and j+2 (repeat)
    args = make_inputs(attn, Case({"batch": 1, "q_heads": 4, "kv_heads": 2, "seq": 5, "head_dim": 8}, (), "float64"))
    q = args["q"].clone()
    q[:, 1] = q[:, 0]
    out = attn(q, args["k"], args["v"])
    torch.testing.assert_close(out[:, 0], out[:, 1])
    assert not torch.allclose(out[:, 0], out[:, 2])


def test_gqa_mismatch_raises_naming_both():
    q, k = torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match=r"q_heads=3.*kv_heads=2"):
        attn(q, k, k)


def test_wrong_shape_names_dim():
    q, k = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
    with pytest.raises(DispatchError, match="head_dim"):
        attn(q, k, torch.randn(1, 2, 5, 16))
    with pytest.raises(DispatchError, match="kv_heads"):
        attn(q, k, torch.randn(1, 1, 5, 8))


# -- SDPA backends on CPU ---------------------------------------------------------------------------

def _sdpa_cases():
    for dtype in ("float32", "bfloat16", "float16"):
        for dims, causal, scale in CASES:
            yield Case(dims, (), dtype, {"is_causal": causal, "scale": scale})


@pytest.mark.parametrize("backend", ["sdpa:math", "sdpa:flash"])
@pytest.mark.parametrize("case", list(_sdpa_cases()), ids=lambda c: c.label)
def test_sdpa_backend_matches_reference(backend, case):
    args = make_inputs(attn, case)
    want = attn(**args)
    got = attn(**args, backend=backend)
    assert got.dtype == want.dtype and got.shape == want.shape
    err = (got.double() - want.double()).abs().max().item()
    assert err <= 2 * TOL[case.dtype] * max(1.0, want.abs().max().item()), f"{backend}: {err:.3e}"


@pytest.mark.parametrize("backend", ["sdpa:efficient", "sdpa:cudnn"])
def test_cuda_only_backends_decline_on_cpu(backend):
    args = make_inputs(attn, Case({"batch": 1, "q_heads": 4, "kv_heads": 2, "seq": 5, "head_dim": 16}, (), "float16"))
    with pytest.raises(DispatchError, match="predicate"):
        attn(**args, backend=backend)


def test_a_sequence_major_layout_is_named_as_a_layout_mismatch():
    q = torch.randn(2, 16, 8, 64)  # flash-attn's (batch, seq, heads, head_dim)
    k = v = torch.randn(2, 16, 2, 64)
    with pytest.raises(DispatchError, match=r"layout: q, k and v are \(batch, heads, seq, head_dim\)"):
        attn(q, k, v)


def test_called_like_sdpa_causal_off_by_default():
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    torch.testing.assert_close(attn(q, k, v), F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(attn(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v, is_causal=True))
