"""swiglu on flash-linear-attention's fused SiLU(gate) * up."""


def swiglu(gate, up):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from fla.modules.activations import swiglu as fla_swiglu
    return fla_swiglu(gate, up)
