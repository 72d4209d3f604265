"""gelu on flash-linear-attention's fused forward and backward: the tanh approximation only (gated),
computed in x's dtype by torch.compile'd functions."""

from popcorn.core.imports import imported


def gelu(x, approximate):
    return imported("fla.modules.activations:fast_gelu_impl")(x)
