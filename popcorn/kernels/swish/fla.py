"""swish (SiLU) on flash-linear-attention's Triton kernel."""

from fla.modules.activations.ops import swish as fla_swish


def swish(x):
    return fla_swish(x)
