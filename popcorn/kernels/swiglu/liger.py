"""swiglu on liger-kernel's fused SiLU(gate) * up."""

from popcorn.core.imports import imported


def swiglu(gate, up):
    return imported("liger_kernel.ops.swiglu:LigerSiLUMulFunction").apply(gate, up)
