"""cross_entropy: token-level cross-entropy of logits against class targets, as torch defines it.

Rows whose target is ignore_index contribute 0 (also under reduction='none') and leave the mean's
denominator; a mean over zero kept rows is 0/0 = nan, as in torch. Label smoothing follows torch:
(1 - ls) * nll + ls * mean over classes of -log p. The loss is fp32 (fp64 on fp64 logits).
"""

from typing import Literal

import torch

from popcorn.core import HALF, Float, Int, dtypes, one_of, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda, on_sm90, whole_vectors


def target_domain(shape, case, generator) -> torch.Tensor:
    """Valid class indices in [0, vocab) with ~10% of rows set to ignore_index, never every row."""
    vocab = case.dims["vocab"]
    ignore_index = case.args.get("ignore_index", -100)
    target = torch.randint(0, vocab, shape, generator=generator, dtype=torch.int64)
    ignored = torch.rand(shape, generator=generator) < 0.1
    target = torch.where(ignored, torch.full_like(target, ignore_index), target)
    if target.numel() and bool((target == ignore_index).all()):
        target[0] = 1 if ignore_index == 0 and vocab > 1 else 0
    return target


def _cross_entropy_from_logits(logits: torch.Tensor, target: torch.Tensor, ignore_index: int,
                               label_smoothing: float, reduction: str) -> torch.Tensor:
    """The loss on ``upcast(logits)``: shared by cross_entropy and linear_cross_entropy."""
    logp = torch.log_softmax(upcast(logits), dim=-1)
    keep = target != ignore_index
    safe = torch.where(keep, target, torch.zeros_like(target)).long()
    loss = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    if label_smoothing:
        loss = (1.0 - label_smoothing) * loss - label_smoothing * logp.mean(-1)
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / keep.sum()  # 0/0 = nan when every row is ignored, like torch
    raise ValueError(f"cross_entropy: unknown reduction {reduction!r}")


def _log_probs(case) -> int:
    """The upcast tokens x vocab log-probabilities."""
    return case.dims["tokens"] * case.dims["vocab"]


@register_kernel(workspace=_log_probs, args={"label_smoothing": [0.0, 0.1]}, inputs={"target": target_domain}, tags=("loss",))
def cross_entropy(
    logits: Float["tokens vocab"],
    target: Int["tokens"],
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: Literal["mean", "sum", "none"] = "mean",
) -> Float["..."]:
    """Cross-entropy of fp32-upcast logits against class targets, with ignore_index and label smoothing.

    $$\\ell_t = (1-\\varepsilon)\\left(-\\log \\mathrm{softmax}(z_t)_{y_t}\\right) + \\frac{\\varepsilon}{V}\\sum_{c=1}^{V} -\\log \\mathrm{softmax}(z_t)_c, \\quad \\mathcal{L}_{\\text{mean}} = \\frac{\\sum_{t: y_t \\ne \\text{ignore}} \\ell_t}{|\\{t: y_t \\ne \\text{ignore}\\}|}$$

    [torch.nn.functional.cross_entropy](https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html)
    [Szegedy et al., 2016 (label smoothing)](https://arxiv.org/abs/1512.00567)
    """
    return _cross_entropy_from_logits(logits, target, ignore_index, label_smoothing, reduction)


# -- backends: adapters beside this file, imported on first use ------------------------------------
cross_entropy.register("liger", source="popcorn.kernels.cross_entropy.liger:cross_entropy", predicate=on_cuda,
                       out_dtypes={0: "logits"})  # the loss in the logits' dtype
# fla: fp32 losses (no fp64)
cross_entropy.register("fla", source="popcorn.kernels.cross_entropy.fla:cross_entropy", predicate=on_cuda,
                       gates={"logits": dtypes(*HALF, torch.float32)})


def quack_vocab_fits(**arguments) -> bool:
    """On Hopper or newer, with a vocab of whole 16-byte vectors and at most 256k classes (quack's
    backward loads rows in 16-byte vectors; its cluster sizes are chosen up to 256k)."""
    if not on_sm90(**arguments):
        return False
    logits = arguments["logits"]
    return whole_vectors(logits) and logits.shape[-1] <= 256 * 1024


cross_entropy.register("quack", source="popcorn.kernels.cross_entropy.quack:cross_entropy",
                       predicate=quack_vocab_fits,
                       gates={"logits": dtypes(*HALF, torch.float32), "label_smoothing": one_of(0.0)})
