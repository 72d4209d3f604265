"""group_norm on flash-linear-attention's grouped layer-norm kernel.

fla normalizes groups of the last dimension, with a weight per element of it. A contiguous
(batch, channels, width) tensor viewed as (batch, channels * width) puts each group of
channels // num_groups channels in one such slice, so the kernel runs on that view with the
per-channel weight and bias repeated over width (their gradients sum back through the repeat).
"""

from popcorn.core.imports import imported


def group_norm(x, weight, bias, num_groups, eps):
    n, channels, width = x.shape
    weight = weight.repeat_interleave(width)
    bias = None if bias is None else bias.repeat_interleave(width)
    gn = imported("fla.modules.norm.layernorm:group_norm")
    return gn(x.reshape(n, channels * width), weight, bias, eps=eps, num_groups=num_groups).view(n, channels, width)
