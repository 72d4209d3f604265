"""linear_cross_entropy on liger-kernel's fused linear cross-entropy: the logits are made chunk by
chunk and never stored whole; the gradients are computed during the forward.

Liger computes the weight's and bias's gradients only when x requires grad (for 'mean' and 'sum'):
the registration's predicate sends the other calls elsewhere.
"""

from popcorn.core.imports import imported


def linear_cross_entropy(x, weight, target, bias, ignore_index, label_smoothing, reduction):
    # (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction):
    # the first of (loss, z_loss, token_accuracy, predicted_tokens)
    flce = imported("liger_kernel.ops.fused_linear_cross_entropy:LigerFusedLinearCrossEntropyFunction")
    return flce.apply(x, weight, target, bias, None, ignore_index, 0.0, label_smoothing, reduction)[0]
