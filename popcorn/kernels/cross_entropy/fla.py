"""cross_entropy on flash-linear-attention's fused kernel: per-row fp32 losses, reduced here as its
FusedCrossEntropyLoss reduces them (the mean over kept rows: 0/0 = nan when every row is ignored,
as in torch)."""

from popcorn.core.imports import imported


def cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    ce = imported("fla.modules.fused_cross_entropy:cross_entropy_loss")
    loss, _ = ce(logits, target, label_smoothing=label_smoothing, ignore_index=ignore_index)  # (loss, z_loss)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (target != ignore_index).sum()
