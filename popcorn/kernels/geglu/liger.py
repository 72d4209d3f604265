"""geglu on liger-kernel's fused GELU(gate) * up (the tanh approximation only: gated)."""


def geglu(gate, up, approximate):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    return LigerGELUMulFunction.apply(gate, up)
