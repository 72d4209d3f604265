"""attn_varlen: packed variable-length attention, as in flash_attn_varlen_func."""

import torch

from popcorn.core import HALF, Float, Int, dtypes, one_of, register_kernel
from popcorn.core.constraints import at_most

from ..attn import GQA, _attention, fa4_fits, fla_heads_fit


def _cu_seqlens(shape, case, generator):
    """int32 boundaries 0 = c_0 < c_1 < ... = total at random cut points.

    With more sequences than tokens (boundaries - 1 > total), every token is its own sequence and the
    surplus boundaries repeat ``total`` (trailing empty sequences), so the tensor keeps its shape.
    """
    (boundaries,) = shape
    total = case.dims["total"]
    if boundaries < 2:
        return torch.zeros(boundaries, dtype=torch.int32)
    n = min(boundaries - 1, total)  # non-empty sequences
    cuts = (torch.randperm(max(total - 1, 0), generator=generator)[: max(n - 1, 0)] + 1).sort().values
    ends = torch.full((boundaries - 1 - len(cuts),), total, dtype=torch.int64)
    return torch.cat([torch.zeros(1, dtype=torch.int64), cuts, ends]).to(torch.int32)


def _scores(case) -> int:
    """Score matrices of the longest sequences: random cuts make the longest about 8x the mean length."""
    total, n = case.dims["total"], max(1, case.dims["boundaries"] - 1)
    return case.dims["q_heads"] * total * min(total, max(1, 8 * -(-total // n)))


def _like_q(q, k, v, cu_seqlens, causal=True, scale=None):
    """The output's shape and dtype for tracing: the reference splits by the boundaries' values."""
    return torch.empty_like(q)


# More boundaries than total + 1 are legal calls (trailing empty sequences) that the plan gains nothing from.
_BOUNDARIES = at_most("boundaries", "total+1", plan_only=True, why="at most one sequence per token")


@register_kernel(workspace=_scores, fake=_like_q, args={"scale": [None, 0.125]}, inputs={"cu_seqlens": _cu_seqlens},
                 constraints=[GQA, _BOUNDARIES], tags=("attention", "varlen"))
def attn_varlen(
    q: Float["total q_heads head_dim"],
    k: Float["total kv_heads head_dim"],
    v: Float["total kv_heads head_dim"],
    cu_seqlens: Int["boundaries"],
    causal: bool = True,
    scale: float | None = None,
) -> Float["total q_heads head_dim"]:
    """Softmax attention over packed variable-length sequences, each attending only within itself, in fp32.

    $$O_{[c_i, c_{i+1})} = \\operatorname{attn}\\left(Q_{[c_i, c_{i+1})}, K_{[c_i, c_{i+1})}, V_{[c_i, c_{i+1})}\\right), \\quad 0 = c_0 \\le c_1 \\le \\dots \\le c_n = T$$

    [Dao, 2023](https://arxiv.org/abs/2307.08691)
    [flash_attn_varlen_func](https://github.com/Dao-AILab/flash-attention/blob/main/flash_attn/flash_attn_interface.py)
    """
    total = q.shape[0]
    bounds = cu_seqlens.tolist()
    if not bounds or bounds[0] != 0 or bounds[-1] != total:
        raise ValueError(f"attn_varlen: cu_seqlens must start at 0 and end at total={total}, got {bounds}")
    if any(b > a for a, b in zip(bounds[1:], bounds[:-1])):
        raise ValueError(f"attn_varlen: cu_seqlens must be non-decreasing, got {bounds}")
    pieces = [
        # (len, heads, d) -> (heads, len, d) for attn's math, and back
        _attention(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), causal, scale)
        .transpose(0, 1)
        for s, e in zip(bounds[:-1], bounds[1:])
    ]
    out = torch.cat(pieces) if pieces else _attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                      causal, scale).transpose(0, 1)
    return out.to(q.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
# fla: causal only; half precision only (its dots take fp32 operands as tf32, below fp32's accuracy)
attn_varlen.register("fla", source="popcorn.kernels.attn_varlen.fla:attn_varlen", predicate=fla_heads_fit,
                     gates={"causal": one_of(True), "q": dtypes(*HALF)})


def fa4_packed_fits(**arguments) -> bool:
    """fa4_fits, with the int32 boundaries its varlen kernel asserts."""
    return fa4_fits(**arguments) and arguments["cu_seqlens"].dtype == torch.int32


attn_varlen.register("fa4", source="popcorn.kernels.attn_varlen.fa4:attn_varlen", predicate=fa4_packed_fits,
                     gates={"q": dtypes(*HALF)})
