"""cross_entropy on quack's CuTe DSL kernel (fp32 losses, ignore_index and torch's reductions; no
label smoothing: gated)."""

from popcorn.core.devices import dense
from popcorn.core.imports import imported


def cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    ce = imported("quack.cross_entropy:cross_entropy")
    return ce(dense(logits), target, ignore_index=ignore_index, reduction=reduction)
