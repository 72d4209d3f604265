"""cross_entropy on liger-kernel's Triton kernel: the loss and the logits' gradient in one pass."""


def cross_entropy(logits, target, ignore_index, label_smoothing, reduction):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    # (input, target, class weight, ignore_index, lse_square_scale, label_smoothing, reduction):
    # the first of (loss, z_loss, token_accuracy)
    return LigerCrossEntropyFunction.apply(logits, target, None, ignore_index, 0.0, label_smoothing, reduction)[0]
