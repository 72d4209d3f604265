"""swiglu: the SwiGLU gate of a gated MLP, silu(gate) * up."""

import torch
import torch.nn.functional as F

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda


@register_kernel(batch="token_rows", tags=("activation",))
def swiglu(
    gate: Float["... intermediate"],
    up: Float["... intermediate"],
) -> Float["... intermediate"]:
    """SwiGLU: the SiLU of the gate projection times the up projection, computed in fp32.

    $$y = \\operatorname{SiLU}(g) \\odot u = \\frac{g}{1 + e^{-g}} \\odot u$$

    [Shazeer, 2020](https://arxiv.org/abs/2002.05202)
    """
    out = F.silu(upcast(gate)) * upcast(up)
    return out.to(torch.promote_types(gate.dtype, up.dtype))


# -- backends: adapters beside this file, imported on first use ------------------------------------
swiglu.register("liger", source="popcorn.kernels.swiglu.liger:swiglu", predicate=on_cuda)
swiglu.register("fla", source="popcorn.kernels.swiglu.fla:swiglu", predicate=on_cuda)
