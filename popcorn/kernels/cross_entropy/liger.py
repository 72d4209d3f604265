"""cross_entropy on liger-kernel's Triton kernel: the loss and the logits' gradient in one pass."""

from popcorn.core.imports import imported


def cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    # (input, target, class weight, ignore_index, lse_square_scale, label_smoothing, reduction):
    # the first of (loss, z_loss, token_accuracy)
    ce = imported("liger_kernel.ops.cross_entropy:LigerCrossEntropyFunction")
    return ce.apply(logits, target, None, ignore_index, 0.0, label_smoothing, reduction)[0]
