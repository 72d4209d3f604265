"""attn_varlen on FlashAttention 4's varlen kernel (flash_attn.cute), the layout this op copies: packed
(total, heads, head_dim) tensors and int32 boundaries, the same for queries and keys. Its function
returns (out, lse)."""

from popcorn.core.imports import imported


def attn_varlen(q, k, v, cu_seqlens, causal, scale):
    fn = imported("flash_attn.cute:flash_attn_varlen_func")
    out, _ = fn(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens, softmax_scale=scale, causal=causal)
    return out
