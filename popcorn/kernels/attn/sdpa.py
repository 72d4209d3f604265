"""attn's torch SDPA backends: F.scaled_dot_product_attention pinned to one kernel, and what each
kernel takes (its predicate; dtypes are gated at registration in the op's module)."""

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from popcorn.core import HALF


def adapter(backend: SDPBackend):
    """An adapter with attn's parameters running F.scaled_dot_product_attention on ``backend`` only."""
    def run(q, k, v, is_causal=False, scale=None):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                                  enable_gqa=q.shape[1] != k.shape[1])
    run.__name__ = run.__qualname__ = f"sdpa_{backend.name.lower()}"
    return run


def flash_ok(q, **_) -> bool:
    """CUDA: fp16/bf16 with head_dim <= 256 (gated by predicate: CPU's flash kernel takes every float dtype)."""
    if q.device.type == "cuda":
        return q.dtype in HALF and q.shape[-1] <= 256
    return q.device.type == "cpu"


def efficient_ok(q, k, **_) -> bool:
    """Memory-efficient attention: CUDA only, no enable_gqa, head_dim a multiple of 8 (fp16/bf16) or 4 (fp32)."""
    align = 8 if q.dtype in HALF else 4
    return q.device.type == "cuda" and q.shape[1] == k.shape[1] and q.shape[-1] % align == 0


def cudnn_ok(q, **_) -> bool:
    """cuDNN attention: CUDA, head_dim <= 128 and a multiple of 8, seq > 1 (fp16/bf16, dtype gated)."""
    return q.device.type == "cuda" and q.shape[-1] <= 128 and q.shape[-1] % 8 == 0 and q.shape[-2] > 1
