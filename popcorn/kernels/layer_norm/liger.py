"""layer_norm on liger-kernel's Triton kernel."""

import torch
from liger_kernel.ops.layer_norm import LigerLayerNormFunction


def layer_norm(x, weight, bias, eps):
    # liger's kernel always reads a bias: a zero one (no gradient) stands in for an absent bias
    return LigerLayerNormFunction.apply(x, weight, torch.zeros_like(weight) if bias is None else bias, eps)
