"""rms_norm: root-mean-square normalization over the last dimension."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core import devices
from popcorn.core.devices import on_cuda_rows, on_sm90


@register_kernel(batch="token_rows", args={"eps": [1e-6, 1e-5]}, tags=("normalization",))
def rms_norm(
    x: Float["... normalized_shape"],
    weight: Float["normalized_shape"],
    eps: float = 1e-6,
) -> Float["... normalized_shape"]:
    """Root-mean-square normalization over the last dimension, scaled by a learned weight.

    $$y = \\frac{x}{\\sqrt{\\tfrac{1}{n}\\sum_{i=1}^{n} x_i^2 + \\epsilon}} \\odot w$$

    [Zhang and Sennrich, 2019](https://arxiv.org/abs/1910.07467)
    """
    xf = upcast(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * upcast(weight)).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
rms_norm.register("liger", source="popcorn.kernels.rms_norm.liger:rms_norm",
                  predicate=on_cuda_rows("x", max_elements=65536))  # a row in one Triton block: 64K elements
rms_norm.register("fla", source="popcorn.kernels.rms_norm.fla:rms_norm",
                  predicate=on_cuda_rows("x", max_bytes=65536))  # a row in one Triton block: 64 KB


def quack_fits(**arguments) -> bool:
    """On Hopper or newer, and not an fp32 row over 128k elements (quack's backward refuses those)."""
    if not on_sm90(**arguments):
        return False
    x = arguments["x"]
    return x.element_size() < 4 or x.shape[-1] <= 128 * 1024


rms_norm.register("quack", source="popcorn.kernels.rms_norm.quack:rms_norm", predicate=quack_fits,
                  gates={"x": dtypes(*HALF, torch.float32)})


def cudnn_fits(**arguments) -> bool:
    """On CUDA with the weight in x's dtype (cuDNN's graph takes one I/O type)."""
    return devices.on_cuda(**arguments) and arguments["weight"].dtype == arguments["x"].dtype


rms_norm.register("cudnn", source="popcorn.kernels.rms_norm.cudnn:rms_norm", predicate=cudnn_fits,
                  gates={"x": dtypes(*HALF, torch.float32)})
