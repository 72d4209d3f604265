"""kl_div: KL divergence loss with torch.nn.KLDivLoss semantics (input in log-space).

With log_target off, entries where the target is 0 contribute 0 (xlogy), as in torch. 'batchmean'
divides the sum by the number of rows, 'mean' by the number of elements. The loss is fp32 (fp64 on
fp64 inputs), also under reduction='none'.
"""

from typing import Literal

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.numerics import upcast


def log_probs(shape, case, generator) -> torch.Tensor:
    """Row-wise log-probabilities: log_softmax of standard-normal logits."""
    return torch.log_softmax(torch.randn(shape, generator=generator, dtype=torch.float64), dim=-1)


def target_domain(shape, case, generator) -> torch.Tensor:
    """Probabilities, or log-probabilities when the case sets log_target."""
    z = torch.randn(shape, generator=generator, dtype=torch.float64)
    return torch.log_softmax(z, dim=-1) if case.args.get("log_target") else torch.softmax(z, dim=-1)


@register_kernel(inputs={"input": log_probs, "target": target_domain}, tags=("loss",))
def kl_div(
    input: Float["tokens vocab"],
    target: Float["tokens vocab"],
    reduction: Literal["batchmean", "sum", "mean", "none"] = "batchmean",
    log_target: bool = False,
) -> Float["..."]:
    """Pointwise KL divergence of target from the log-probabilities input, reduced as torch's KLDivLoss.

    $$\\ell_{t,c} = p_{t,c}\\left(\\log p_{t,c} - x_{t,c}\\right), \\quad p = \\begin{cases} e^{y} & \\text{log\\_target} \\\\ y & \\text{otherwise} \\end{cases}, \\quad \\mathcal{L}_{\\text{batchmean}} = \\frac{1}{T}\\sum_{t,c} \\ell_{t,c}$$

    [torch.nn.KLDivLoss](https://pytorch.org/docs/stable/generated/torch.nn.KLDivLoss.html)
    """
    x, y = upcast(input), upcast(target)
    if log_target:
        loss = torch.exp(y) * (y - x)
    else:
        loss = torch.xlogy(y, y) - y * x
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    if reduction == "batchmean":
        return loss.sum() / input.shape[0]
    raise ValueError(f"kl_div: unknown reduction {reduction!r}")
