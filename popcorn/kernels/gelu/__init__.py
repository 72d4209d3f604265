"""gelu: the Gaussian error linear unit, exact (erf) or tanh-approximated."""

from typing import Literal

import torch.nn.functional as F

from popcorn.core import Float, one_of, register_kernel
from popcorn.core.devices import on_cuda
from popcorn.core.numerics import upcast


@register_kernel(batch="token_rows", tags=("activation",))
def gelu(
    x: Float["... hidden"],
    approximate: Literal["none", "tanh"] = "none",
) -> Float["... hidden"]:
    """Gaussian error linear unit, exact (erf) or tanh-approximated, computed in fp32.

    $$\\operatorname{GELU}(x) = x\\,\\Phi(x) = \\tfrac{x}{2}\\left(1 + \\operatorname{erf}(x/\\sqrt{2})\\right) \\approx \\tfrac{x}{2}\\left(1 + \\tanh\\left(\\sqrt{2/\\pi}\\,(x + 0.044715\\,x^3)\\right)\\right)$$

    [Hendrycks and Gimpel, 2016](https://arxiv.org/abs/1606.08415)
    """
    return F.gelu(upcast(x), approximate=approximate).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
gelu.register("fla", source="popcorn.kernels.gelu.fla:gelu", predicate=on_cuda,
              gates={"approximate": one_of("tanh")})
