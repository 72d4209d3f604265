"""layer_norm on liger-kernel's Triton kernel."""

import torch


def layer_norm(x, weight, bias, eps):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    # liger's kernel always reads a bias: a zero one (no gradient) stands in for an absent bias
    return LigerLayerNormFunction.apply(x, weight, torch.zeros_like(weight) if bias is None else bias, eps)
