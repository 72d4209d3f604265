"""rope on liger-kernel's Triton kernel (rotate_half, HF Llama's layout)."""

from popcorn.core.imports import imported


def rope(q, k, cos, sin):
    return imported("liger_kernel.ops.rope:LigerRopeFunction").apply(q, k, cos, sin)
