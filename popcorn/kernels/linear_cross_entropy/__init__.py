"""linear_cross_entropy: an lm_head projection followed by cross-entropy (the fused-linear loss)."""

from typing import Literal

import torch

from popcorn.core import HALF, Float, Int, dtypes, one_of, register_kernel
from popcorn.core.devices import on_cuda

from ..cross_entropy import _cross_entropy_from_logits, target_domain


def _logits(case) -> int:
    """The tokens x vocab logits the reference materializes."""
    return case.dims["tokens"] * case.dims["vocab"]


@register_kernel(workspace=_logits, args={"label_smoothing": [0.0, 0.1]}, inputs={"target": target_domain}, tags=("loss", "fused"))
def linear_cross_entropy(
    x: Float["tokens hidden"],
    weight: Float["vocab hidden"],
    target: Int["tokens"],
    bias: Float["vocab"] | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> Float["..."]:
    """Cross-entropy of the logits x W^T (+ b), computed in the native dtype and upcast to fp32 for the loss.

    $$z_t = x_t W^\\top + b, \\quad \\ell_t = (1-\\varepsilon)\\left(-\\log \\mathrm{softmax}(z_t)_{y_t}\\right) + \\frac{\\varepsilon}{V}\\sum_{c=1}^{V} -\\log \\mathrm{softmax}(z_t)_c, \\quad \\mathcal{L}_{\\text{mean}} = \\frac{\\sum_{t: y_t \\ne \\text{ignore}} \\ell_t}{|\\{t: y_t \\ne \\text{ignore}\\}|}$$

    [Liger Kernel fused linear cross entropy](https://arxiv.org/abs/2410.10989)
    [Wijmans et al., 2024 (Cut Your Losses)](https://arxiv.org/abs/2411.09009)
    """
    logits = x @ weight.transpose(0, 1)
    if bias is not None:
        logits = logits + bias
    return _cross_entropy_from_logits(logits, target, ignore_index, label_smoothing, reduction)


# -- backends: adapters beside this file, imported on first use ------------------------------------
def liger_grads_flow(**arguments) -> bool:
    """On CUDA, and not a call whose weight or bias needs a gradient while x does not: liger computes
    theirs only beside x's (for 'mean' and 'sum'; 'none' recomputes them in its backward)."""
    if not on_cuda(**arguments):
        return False
    x, weight, bias = arguments["x"], arguments["weight"], arguments["bias"]
    frozen_x = torch.is_grad_enabled() and not x.requires_grad and arguments["reduction"] != "none"
    return not (frozen_x and (weight.requires_grad or (bias is not None and bias.requires_grad)))


# the loss in fp32 (no fp64) in both
linear_cross_entropy.register("liger", source="popcorn.kernels.linear_cross_entropy.liger:linear_cross_entropy",
                              predicate=liger_grads_flow, gates={"x": dtypes(*HALF, torch.float32)})
linear_cross_entropy.register("fla", source="popcorn.kernels.linear_cross_entropy.fla:linear_cross_entropy",
                              predicate=on_cuda, gates={"x": dtypes(*HALF, torch.float32),
                                                        "reduction": one_of("mean", "sum")})
