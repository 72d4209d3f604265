import pytest
import torch

from popcorn.core import Case, DispatchError
from popcorn.core.inputs import make_inputs
from popcorn.kernels.rope import rope

from .check import agree


def _rotation(head_dim: int, dtype) -> torch.Tensor:
    """R with (x @ R) = rotate_half(x): column j < h takes -x[j + h], column j >= h takes x[j - h]."""
    h = head_dim // 2
    r = torch.zeros(head_dim, head_dim, dtype=dtype)
    for j in range(h):
        r[j + h, j] = -1.0
        r[j, j + h] = 1.0
    return r


def independent(q, k, cos, sin):
    r = _rotation(q.shape[-1], q.dtype)
    c = cos.reshape(-1, *cos.shape[-2:])[:, None]  # over heads; a table of batch 1 (or none) broadcasts
    s = sin.reshape(-1, *sin.shape[-2:])[:, None]
    rot = lambda x: x * c + torch.einsum("bhsd,de->bhse", x, r) * s  # noqa: E731
    return rot(q), rot(k)


CASES = [
    # GQA: q_heads=4 with kv_heads 2 and 1; tables of batch 1 (broadcast), == batch, and (seq, head_dim); odd seq
    ({"batch": 2, "q_heads": 4, "kv_heads": 2, "seq": 9, "head_dim": 16}, (1,)),
    ({"batch": 2, "q_heads": 4, "kv_heads": 1, "seq": 17, "head_dim": 32}, (2,)),
    ({"batch": 1, "q_heads": 4, "kv_heads": 4, "seq": 3, "head_dim": 48}, (1,)),
    ({"batch": 3, "q_heads": 4, "kv_heads": 2, "seq": 5, "head_dim": 8}, ()),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("dims,table", CASES)
def test_matches_fp64(dims, table, dtype):
    agree(rope, independent, Case(dims, table, dtype))


def test_a_seq_by_head_dim_table_serves_every_batch_entry():
    q, k = torch.randn(3, 4, 5, 8), torch.randn(3, 2, 5, 8)
    args = make_inputs(rope, Case({"batch": 3, "q_heads": 4, "kv_heads": 2, "seq": 5, "head_dim": 8}, (),
                                  "float32"))
    cos, sin = args["cos"], args["sin"]
    assert cos.shape == (5, 8)
    two_d = rope(q, k, cos, sin)
    three_d = rope(q, k, cos.expand(3, 5, 8), sin.expand(3, 5, 8))
    for a, b in zip(two_d, three_d):
        torch.testing.assert_close(a, b)


def test_rotary_table_is_real():
    args = make_inputs(rope, Case({"batch": 3, "q_heads": 4, "kv_heads": 2, "seq": 5, "head_dim": 8},
                                  (3,), "float32"))
    cos, sin = args["cos"], args["sin"]
    assert cos.shape == (3, 5, 8)
    torch.testing.assert_close(cos[..., :4], cos[..., 4:])  # the halves are equal, as in real models
    torch.testing.assert_close(cos**2 + sin**2, torch.ones_like(cos))
    assert torch.equal(cos[0, 0], torch.ones(8))  # position 0 does not rotate
    assert torch.equal(cos[0], cos[2])


def test_position_zero_is_identity_and_norm_is_kept():
    args = make_inputs(rope, Case({"batch": 2, "q_heads": 4, "kv_heads": 1, "seq": 7, "head_dim": 16},
                                  (1,), "float64"))
    q_out, k_out = rope(**args)
    assert torch.equal(q_out[:, :, 0], args["q"][:, :, 0]) and torch.equal(k_out[:, :, 0], args["k"][:, :, 0])
    # each (i, i + d/2) pair is rotated, so per-pair norms are kept
    pair = lambda x: x[..., :8] ** 2 + x[..., 8:] ** 2  # noqa: E731
    torch.testing.assert_close(pair(q_out), pair(args["q"]))


def test_bad_cos_batch_and_odd_head_dim_raise():
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
    cos, sin = torch.randn(3, 5, 8), torch.randn(3, 5, 8)
    with pytest.raises(ValueError, match=r"leading dims \[3\] must be none"):
        rope(q, k, cos, sin)
    q, k, cos, sin = torch.randn(1, 2, 5, 7), torch.randn(1, 2, 5, 7), torch.randn(1, 5, 7), torch.randn(1, 5, 7)
    with pytest.raises(ValueError, match="even"):
        rope(q, k, cos, sin)


def test_wrong_shape_names_dim():
    q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
    with pytest.raises(DispatchError, match="head_dim"):
        rope(q, k, torch.randn(1, 5, 6), torch.randn(1, 5, 6))
    with pytest.raises(DispatchError, match="'seq'"):
        rope(q, k, torch.randn(1, 4, 8), torch.randn(1, 4, 8))
