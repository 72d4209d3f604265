"""group_norm on liger-kernel's Triton kernel (batch, channels, width: the layout it takes)."""

import torch

from popcorn.core.imports import imported


def group_norm(x, weight, bias, num_groups, eps):
    # liger's kernel always reads a bias: a zero one (no gradient) stands in for an absent bias
    bias = torch.zeros_like(weight) if bias is None else bias
    gn = imported("liger_kernel.ops.group_norm:LigerGroupNormFunction")
    return gn.apply(x, weight, bias, x.shape[1], num_groups, eps)
