"""logsumexp: log-sum-exp over the last dimension."""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast


@register_kernel(batch="token_rows", tags=("reduction",))
def logsumexp(x: Float["... vocab"]) -> Float["..."]:
    """Log-sum-exp over the last dimension, computed in fp32 and cast back to the input dtype.

    $$y = m + \\log \\sum_{i=1}^{n} e^{x_i - m}, \\quad m = \\max_i x_i$$
    """
    return torch.logsumexp(upcast(x), dim=-1).to(x.dtype)
