"""swiglu on liger-kernel's fused SiLU(gate) * up."""

from liger_kernel.ops.swiglu import LigerSiLUMulFunction


def swiglu(gate, up):
    return LigerSiLUMulFunction.apply(gate, up)
