"""kl_div: KL divergence loss with torch.nn.KLDivLoss semantics (input in log-space).

Entries where the target probability is 0 contribute 0 and no gradient, whatever the input holds:
masked vocabularies put -inf in both, where torch's formula gives 0 * -inf = NaN. 'batchmean'
divides the sum by the number of rows, 'mean' by the number of elements. The loss is fp32 (fp64 on
fp64 inputs), also under reduction='none'.
"""

from typing import Literal

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda


def log_probs(shape, case, generator) -> torch.Tensor:
    """Row-wise log-probabilities: log_softmax of standard-normal logits."""
    return torch.log_softmax(torch.randn(shape, generator=generator, dtype=torch.float64), dim=-1)


def kl_terms(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """Pointwise ``a * (log a - log b)`` from log-probabilities: 0 (with zero gradients) where a = 0,
    +inf where only b = 0. Masked operands are replaced before the arithmetic, so neither the value
    nor the gradient meets 0 * inf."""
    keep = log_a > float("-inf")
    safe_a = torch.where(keep, log_a, torch.zeros_like(log_a))
    safe_b = torch.where(keep, log_b, torch.zeros_like(log_b))
    return torch.where(keep, torch.exp(safe_a) * (safe_a - safe_b), torch.zeros_like(log_a))


def target_domain(shape, case, generator) -> torch.Tensor:
    """Probabilities, or log-probabilities when the case sets log_target."""
    z = torch.randn(shape, generator=generator, dtype=torch.float64)
    return torch.log_softmax(z, dim=-1) if case.args.get("log_target") else torch.softmax(z, dim=-1)


def _pointwise(case) -> int:
    """Upcast probabilities and the pointwise loss: three tokens x vocab tensors."""
    return 3 * case.dims["tokens"] * case.dims["vocab"]


@register_kernel(workspace=_pointwise, inputs={"input": log_probs, "target": target_domain}, tags=("loss",))
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
        loss = kl_terms(y, x)
    else:  # log y only where y > 0: the log of a masked target never enters the graph
        keep = y > 0
        loss = kl_terms(torch.where(keep, torch.log(torch.where(keep, y, torch.ones_like(y))),
                                    torch.full_like(y, float("-inf"))), x)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    if reduction == "batchmean":
        return loss.sum() / input.shape[0]
    raise ValueError(f"kl_div: unknown reduction {reduction!r}")


# -- backends: adapters beside this file, imported on first use ------------------------------------
# Liger: the loss in fp32 (no fp64), no gradient for the target
kl_div.register("liger", source="popcorn.kernels.kl_div.liger:kl_div", predicate=on_cuda,
                gates={"input": dtypes(*HALF, torch.float32)}, no_grad=("target",))
