"""kl_div on liger-kernel's Triton kernel (torch's reductions and log_target; the loss in fp32).

Liger's backward returns no gradient for the target, declared at the registration. Where the target
is a probability it takes log(max(target, 1e-10)): an entry below 1e-10 moves by at most 1e-10 / e.
"""

from popcorn.core.imports import imported


def kl_div(input, target, reduction, log_target):
    return imported("liger_kernel.ops.kl_div:LigerKLDivLossFunction").apply(input, target, reduction, log_target)
