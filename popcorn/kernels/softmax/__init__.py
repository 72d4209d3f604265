"""softmax: softmax over the last dimension."""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda_rows


@register_kernel(batch="token_rows", tags=("reduction",))
def softmax(x: Float["... vocab"]) -> Float["... vocab"]:
    """Softmax over the last dimension, computed in fp32 and cast back to the input dtype.

    $$y_i = \\frac{e^{x_i - \\max_j x_j}}{\\sum_{k=1}^{n} e^{x_k - \\max_j x_j}}$$
    """
    return torch.softmax(upcast(x), dim=-1).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
softmax.register("liger", source="popcorn.kernels.softmax.liger:softmax",
                 predicate=on_cuda_rows("x", max_elements=65536))  # a row in one Triton block: 64K elements
