"""attn on FlashAttention 4 (flash_attn.cute): grouped-query heads as the reference groups them (q head h
reads kv head h // (q_heads // kv_heads)); seq_q == seq_k, so its bottom-right causal mask is the
reference's top-left one.

FlashAttention takes (batch, seq, heads, head_dim): the tensors are passed transposed (it makes them
contiguous) and the output comes back as a transposed view. Its function returns (out, lse).
"""

from popcorn.core.imports import imported


def attn(q, k, v, is_causal, scale):
    fn = imported("flash_attn.cute:flash_attn_func")
    out, _ = fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale, causal=is_causal)
    return out.transpose(1, 2)
