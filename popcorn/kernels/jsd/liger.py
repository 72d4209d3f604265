"""jsd on liger-kernel's Triton kernel: the loss and the student's gradient in one pass.

Liger returns the loss in the input's dtype (the reference: fp32) and no gradient for the teacher
(target); both are declared at the registration.
"""

from popcorn.core.imports import imported


def jsd(input, target, shift_labels, beta, ignore_index):
    return imported("liger_kernel.ops.jsd:LigerJSDFunction").apply(input, target, shift_labels, beta, ignore_index)
