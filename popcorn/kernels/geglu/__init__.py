"""geglu: the GeGLU gate of a gated MLP, gelu(gate) * up."""

from typing import Literal

import torch
import torch.nn.functional as F

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core import one_of
from popcorn.core.devices import on_cuda


@register_kernel(batch="token_rows", tags=("activation",))
def geglu(
    gate: Float["... intermediate"],
    up: Float["... intermediate"],
    approximate: Literal["tanh", "none"] = "tanh",
) -> Float["... intermediate"]:
    """GeGLU: the GELU (tanh approximation by default) of the gate projection times the up projection, in fp32.

    $$y = \\operatorname{GELU}(g) \\odot u, \\quad \\operatorname{GELU}(g) = \\tfrac{g}{2}\\left(1 + \\tanh\\left(\\sqrt{2/\\pi}\\,(g + 0.044715\\,g^3)\\right)\\right) \\text{ or } \\tfrac{g}{2}\\left(1 + \\operatorname{erf}(g/\\sqrt{2})\\right)$$

    [Shazeer, 2020](https://arxiv.org/abs/2002.05202)
    [Liger Kernel GeGLU](https://github.com/linkedin/Liger-Kernel/blob/main/src/liger_kernel/ops/geglu.py)
    """
    out = F.gelu(upcast(gate), approximate=approximate) * upcast(up)
    return out.to(torch.promote_types(gate.dtype, up.dtype))


# -- backends: adapters beside this file, imported on first use ------------------------------------
geglu.register("liger", source="popcorn.kernels.geglu.liger:geglu", predicate=on_cuda,
               gates={"approximate": one_of("tanh")})
