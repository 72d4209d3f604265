"""geglu on liger-kernel's fused GELU(gate) * up (the tanh approximation only: gated)."""

from popcorn.core.imports import imported


def geglu(gate, up, approximate):
    return imported("liger_kernel.ops.geglu:LigerGELUMulFunction").apply(gate, up)
