"""softmax over the last dimension on liger-kernel's Triton kernel."""

from liger_kernel.ops.softmax import LigerSoftmaxFunction


def softmax(x):
    return LigerSoftmaxFunction.apply(x)
