"""l2_norm: L2 normalization over the last dimension."""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda_rows


@register_kernel(batch="token_rows", args={"eps": [1e-6, 1e-5]}, tags=("normalization",))
def l2_norm(
    x: Float["... hidden"],
    eps: float = 1e-6,
) -> Float["... hidden"]:
    """L2 normalization over the last dimension, with eps added to the squared norm.

    $$y = \\frac{x}{\\sqrt{\\sum_{i=1}^{n} x_i^2 + \\epsilon}}$$

    [flash-linear-attention l2norm](https://github.com/fla-org/flash-linear-attention/blob/main/fla/modules/l2norm.py)
    """
    xf = upcast(x)
    y = xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)
    return y.to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
l2_norm.register("fla", source="popcorn.kernels.l2_norm.fla:l2_norm",
                 predicate=on_cuda_rows("x", max_bytes=65536))  # a row in one Triton block: 64 KB
