"""geglu on liger-kernel's fused GELU(gate) * up (the tanh approximation only: gated)."""

from liger_kernel.ops.geglu import LigerGELUMulFunction


def geglu(gate, up, approximate):
    return LigerGELUMulFunction.apply(gate, up)
