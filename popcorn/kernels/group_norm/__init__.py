"""group_norm: group normalization over channel groups and width."""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.constraints import divides
from popcorn.core.numerics import upcast


GROUPS = divides("num_groups", "channels", why="each group normalizes channels // num_groups channels")


# primary: num_groups and bias curves run along channels, the axis num_groups splits (the default is width)
@register_kernel(args={"num_groups": [32, 1, 8]}, primary="channels", constraints=[GROUPS], tags=("normalization",))
def group_norm(
    x: Float["batch channels width"],
    weight: Float["channels"],
    bias: Float["channels"] | None = None,
    num_groups: int = 32,
    eps: float = 1e-5,
) -> Float["batch channels width"]:
    """Group normalization: channels split into groups, each normalized over its channels and width.

    $$y_{n,c,t} = \\frac{x_{n,c,t} - \\mu_{n,g}}{\\sqrt{\\sigma^2_{n,g} + \\epsilon}} w_c + b_c, \\quad g = \\lfloor c G / C \\rfloor, \\quad \\mu_{n,g}, \\sigma^2_{n,g} \\text{ over } \\{(c, t) : c \\in g\\}$$

    [Wu and He, 2018](https://arxiv.org/abs/1803.08494)
    """
    n, channels, width = x.shape  # the op's binding checked that num_groups divides channels
    xf = upcast(x).reshape(n, num_groups, (channels // num_groups) * width)
    mean = xf.mean(-1, keepdim=True)
    centered = xf - mean
    var = centered.pow(2).mean(-1, keepdim=True)  # biased variance
    y = (centered * torch.rsqrt(var + eps)).reshape(n, channels, width)
    y = y * upcast(weight)[:, None]
    if bias is not None:
        y = y + upcast(bias)[:, None]
    return y.to(x.dtype)
