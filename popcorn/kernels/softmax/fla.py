"""softmax over the last dimension on flash-linear-attention's Triton kernels (fla.ops.utils: a
forward and a backward kernel, joined by an autograd function as fla's own layers join them).

Each row is one block of next_power_of_2(vocab) elements."""

import torch

from popcorn.core.imports import imported


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        p = imported("fla.ops.utils.softmax:softmax_fwd")(x.contiguous(), dtype=x.dtype)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, dp):
        (p,) = ctx.saved_tensors
        return imported("fla.ops.utils.softmax:softmax_bwd")(p, dp.contiguous(), dtype=p.dtype)


def softmax(x):
    return _Softmax.apply(x)
