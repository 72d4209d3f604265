"""layer_norm: layer normalization over the last dimension."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core import devices
from popcorn.core.devices import on_cuda_rows


@register_kernel(batch="token_rows", args={"eps": [1e-5, 1e-6]}, tags=("normalization",))
def layer_norm(
    x: Float["... normalized_shape"],
    weight: Float["normalized_shape"],
    bias: Float["normalized_shape"] | None = None,
    eps: float = 1e-5,
) -> Float["... normalized_shape"]:
    """Layer normalization over the last dimension with a learned scale and optional shift.

    $$y = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}} \\odot w + b, \\quad \\mu = \\tfrac{1}{n}\\sum_{i=1}^{n} x_i, \\quad \\sigma^2 = \\tfrac{1}{n}\\sum_{i=1}^{n} (x_i - \\mu)^2$$

    [Ba et al., 2016](https://arxiv.org/abs/1607.06450)
    """
    xf = upcast(x)
    mean = xf.mean(-1, keepdim=True)
    centered = xf - mean
    var = centered.pow(2).mean(-1, keepdim=True)  # biased variance
    y = centered * torch.rsqrt(var + eps) * upcast(weight)
    if bias is not None:
        y = y + upcast(bias)
    return y.to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
layer_norm.register("liger", source="popcorn.kernels.layer_norm.liger:layer_norm",
                    predicate=on_cuda_rows("x", max_elements=65536))  # a row in one Triton block: 64K elements
layer_norm.register("fla", source="popcorn.kernels.layer_norm.fla:layer_norm",
                    predicate=on_cuda_rows("x", max_bytes=65536))  # a row in one Triton block: 64 KB


def cudnn_fits(**arguments) -> bool:
    """On CUDA with weight and bias of one dtype, x's (or fp32 beside a half-precision x): what cuDNN's
    layer norm graph takes."""
    if not devices.on_cuda(**arguments):
        return False
    x, weight, bias = arguments["x"], arguments["weight"], arguments.get("bias")
    allowed = {x.dtype, torch.float32} if x.dtype in HALF else {x.dtype}
    return weight.dtype in allowed and (bias is None or bias.dtype == weight.dtype)


layer_norm.register("cudnn", source="popcorn.kernels.layer_norm.cudnn:layer_norm", predicate=cudnn_fits,
                    gates={"x": dtypes(*HALF, torch.float32)})
