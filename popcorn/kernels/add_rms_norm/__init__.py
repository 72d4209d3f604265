"""add_rms_norm: residual add fused with root-mean-square normalization over the last dimension."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda_rows

from ..rms_norm import quack_fits


@register_kernel(batch="token_rows", args={"eps": [1e-6, 1e-5]}, tags=("normalization",))
def add_rms_norm(
    x: Float["... normalized_shape"],
    residual: Float["... normalized_shape"],
    weight: Float["normalized_shape"],
    eps: float = 1e-6,
) -> tuple[Float["... normalized_shape"], Float["... normalized_shape"]]:
    """Residual add followed by RMS normalization, returning the normalized output and the new residual.

    $$h = x + r, \\qquad y = \\frac{h}{\\sqrt{\\tfrac{1}{n}\\sum_{i=1}^{n} h_i^2 + \\epsilon}} \\odot w$$

    [Zhang and Sennrich, 2019](https://arxiv.org/abs/1910.07467)
    """
    h = x + residual  # the residual stream is stored in the native dtype
    hf = upcast(h)
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * upcast(weight)).to(x.dtype), h


# -- backends: adapters beside this file, imported on first use ------------------------------------
add_rms_norm.register("liger", source="popcorn.kernels.add_rms_norm.liger:add_rms_norm",
                      predicate=on_cuda_rows("x", max_elements=65536))  # a row in one Triton block: 64K elements
add_rms_norm.register("fla", source="popcorn.kernels.add_rms_norm.fla:add_rms_norm",
                      predicate=on_cuda_rows("x", max_bytes=65536))  # a row in one Triton block: 64 KB
add_rms_norm.register("quack", source="popcorn.kernels.add_rms_norm.quack:add_rms_norm", predicate=quack_fits,
                      gates={"x": dtypes(*HALF, torch.float32)})
