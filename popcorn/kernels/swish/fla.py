"""swish (SiLU) on flash-linear-attention's Triton kernel."""

from popcorn.core.imports import imported


def swish(x):
    return imported("fla.modules.activations.ops:swish")(x)
