"""linear_cross_entropy on flash-linear-attention's fused linear cross-entropy (chunked logits,
gradients computed during the forward and accumulated in fp32; 'mean' and 'sum' only).

With every row ignored its mean is 0 where the reference's is nan (0/0)."""

from popcorn.core.imports import imported


def linear_cross_entropy(x, weight, target, bias, ignore_index, label_smoothing, reduction):
    flce = imported("fla.modules.fused_linear_cross_entropy:fused_linear_cross_entropy_loss")
    return flce(x, target, weight, bias, ignore_index=ignore_index, label_smoothing=label_smoothing,
                reduction=reduction)
