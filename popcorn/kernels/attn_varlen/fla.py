"""attn_varlen on flash-linear-attention's parallel softmax attention over packed sequences
(causal only; fla takes the packed tokens as a batch of one)."""

from popcorn.core.imports import imported


def attn_varlen(q, k, v, cu_seqlens, causal, scale):
    fn = imported("fla.ops.attn:parallel_attn")
    return fn(q[None], k[None], v[None], scale=scale, cu_seqlens=cu_seqlens)[0]
