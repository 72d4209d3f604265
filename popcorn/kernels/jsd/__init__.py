"""jsd: Liger's generalized Jensen-Shannon divergence between student and teacher log-probabilities.

input = log Q (student), target = log P (teacher). beta = 0 is forward KL(P || Q) and beta = 1 reverse
KL(Q || P), special-cased as in Liger (the general formula degenerates to 0 there). Rows whose
shift_label is ignore_index are dropped; the sum over kept rows is divided by their count (every row
when shift_labels is None), and with no kept rows (or no rows) the loss is 0, as in Liger. Entries a
distribution gives probability 0 (log-probability -inf) contribute 0, and the mixture is formed in
log space, so masked vocabularies and log-probabilities below fp32's exp range (about -104) stay
finite. Unlike Liger, which
returns the loss in the input dtype and no gradient for the teacher, this returns fp32 (fp64 on fp64
inputs) and autograd differentiates both inputs.
"""

import math

import torch

from popcorn.core import HALF, Float, Int, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda

from ..cross_entropy import target_domain as _labels_domain
from ..kl_div import _pointwise, kl_terms, log_probs


@register_kernel(workspace=_pointwise, args={"beta": [0.5, 0.0, 1.0]},
                 inputs={"input": log_probs, "target": log_probs, "shift_labels": _labels_domain}, tags=("loss",))
def jsd(
    input: Float["tokens vocab"],
    target: Float["tokens vocab"],
    shift_labels: Int["tokens"] | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
) -> Float["..."]:
    """Generalized Jensen-Shannon divergence of student log-probs (input) and teacher log-probs (target), averaged over kept rows.

    $$Q = e^{x},\\ P = e^{y},\\ M = \\beta P + (1-\\beta) Q, \\quad \\ell_t = \\begin{cases} \\mathrm{KL}(P_t \\| Q_t) & \\beta = 0 \\\\ \\mathrm{KL}(Q_t \\| P_t) & \\beta = 1 \\\\ \\beta\\,\\mathrm{KL}(P_t \\| M_t) + (1-\\beta)\\,\\mathrm{KL}(Q_t \\| M_t) & \\text{otherwise} \\end{cases}, \\quad \\mathcal{L} = \\frac{\\sum_{t \\in K} \\ell_t}{\\max(|K|, 1)}$$

    [Liger Kernel JSD](https://github.com/linkedin/Liger-Kernel/blob/main/src/liger_kernel/ops/jsd.py)
    [Agarwal et al., 2024 (generalized JSD for distillation)](https://arxiv.org/abs/2306.13649)
    """
    log_q, log_p = upcast(input), upcast(target)
    if beta == 0.0:  # forward KL(P || Q)
        loss = kl_terms(log_p, log_q).sum(-1)
    elif beta == 1.0:  # reverse KL(Q || P)
        loss = kl_terms(log_q, log_p).sum(-1)
    else:
        # log M = logaddexp(log beta + log P, log(1 - beta) + log Q); where both are -inf the entry
        # is masked in both terms, and zeros keep logaddexp's gradient (exp(-inf + inf)) out of NaN
        dead = (log_p == float("-inf")) & (log_q == float("-inf"))
        zero = torch.zeros_like(log_p)
        log_m = torch.logaddexp(torch.where(dead, zero, log_p) + math.log(beta),
                                torch.where(dead, zero, log_q) + math.log1p(-beta))
        loss = (beta * kl_terms(log_p, log_m) + (1.0 - beta) * kl_terms(log_q, log_m)).sum(-1)
    if shift_labels is None:
        return loss.sum() / max(input.shape[0], 1)
    keep = shift_labels != ignore_index
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    return loss.sum() / keep.sum().clamp_min(1)


# -- backends: adapters beside this file, imported on first use ------------------------------------
# Liger: the loss in the input's dtype, no gradient for the teacher; fp32 arithmetic (no fp64)
jsd.register("liger", source="popcorn.kernels.jsd.liger:jsd", predicate=on_cuda,
             gates={"input": dtypes(*HALF, torch.float32)}, out_dtypes={0: "input"}, no_grad=("target",))
