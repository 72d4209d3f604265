"""swiglu on flash-linear-attention's fused SiLU(gate) * up."""

from fla.modules.activations import swiglu as fla_swiglu


def swiglu(gate, up):
    return fla_swiglu(gate, up)
