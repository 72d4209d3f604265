"""swish: x * sigmoid(x) (SiLU, swish with beta = 1)."""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda


@register_kernel(batch="token_rows", tags=("activation",))
def swish(x: Float["... hidden"]) -> Float["... hidden"]:
    """Swish (SiLU): the input times its logistic sigmoid, computed in fp32.

    $$\\operatorname{swish}(x) = x\\,\\sigma(x) = \\frac{x}{1 + e^{-x}}$$

    [Ramachandran et al., 2017](https://arxiv.org/abs/1710.05941)
    [Elfwing et al., 2017](https://arxiv.org/abs/1702.03118)
    """
    xf = upcast(x)
    return (xf * torch.sigmoid(xf)).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
swish.register("fla", source="popcorn.kernels.swish.fla:swish", predicate=on_cuda)
