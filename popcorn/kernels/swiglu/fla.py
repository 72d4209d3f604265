"""swiglu on flash-linear-attention's fused SiLU(gate) * up."""

from popcorn.core.imports import imported


def swiglu(gate, up):
    return imported("fla.modules.activations:swiglu")(gate, up)
