"""group_norm: group normalization over channel groups and width."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.devices import on_cuda
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


# -- backends: adapters beside this file, imported on first use ------------------------------------
def fla_group_fits(**arguments) -> bool:
    """On CUDA, with a group (channels // num_groups * width elements) within fla's 64 KB row block."""
    if not on_cuda(**arguments):
        return False
    x = arguments["x"]
    _, channels, width = x.shape
    return channels // arguments["num_groups"] * width * x.element_size() <= 65536


# liger accumulates the weight's and bias's gradients in bf16 below fp32: fp16 ones lose half their
# mantissa (and fp64 is computed in fp32)
group_norm.register("liger", source="popcorn.kernels.group_norm.liger:group_norm", predicate=on_cuda,
                    gates={"x": dtypes(torch.float32, torch.bfloat16)})
group_norm.register("fla", source="popcorn.kernels.group_norm.fla:group_norm", predicate=fla_group_fits,
                    gates={"x": dtypes(*HALF, torch.float32)})
