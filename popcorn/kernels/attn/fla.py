"""attn on flash-linear-attention's parallel softmax attention (causal only; grouped-query heads as
the reference groups them: q head h reads kv head h // (q_heads // kv_heads)).

fla takes (batch, seq, heads, head_dim): the tensors are passed transposed (fla makes them
contiguous) and the output comes back as a transposed view.
"""

from popcorn.core.imports import imported


def attn(q, k, v, is_causal, scale):
    fn = imported("fla.ops.attn:parallel_attn")
    return fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale).transpose(1, 2)
