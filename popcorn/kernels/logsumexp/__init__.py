"""logsumexp: log-sum-exp over the last dimension."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.devices import on_cuda
from popcorn.core.numerics import upcast


@register_kernel(batch="token_rows", tags=("reduction",))
def logsumexp(x: Float["... vocab"]) -> Float["..."]:
    """Log-sum-exp over the last dimension, computed in fp32 and cast back to the input dtype.

    $$y = m + \\log \\sum_{i=1}^{n} e^{x_i - m}, \\quad m = \\max_i x_i$$
    """
    return torch.logsumexp(upcast(x), dim=-1).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
# fla: no backward; fp32 arithmetic (no fp64)
logsumexp.register("fla", source="popcorn.kernels.logsumexp.fla:logsumexp", predicate=on_cuda, forward_only=True,
                   gates={"x": dtypes(*HALF, torch.float32)})
