"""swiglu on liger-kernel's fused SiLU(gate) * up."""


def swiglu(gate, up):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    return LigerSiLUMulFunction.apply(gate, up)
