"""rms_norm on liger-kernel's Triton kernel, Llama casting (fp32 statistics, cast before the weight)."""

from popcorn.core.imports import imported


def rms_norm(x, weight, eps):
    # in_place=False: the in-place backward overwrites the incoming gradient, which another consumer
    # of the same output (a residual branch) may still read
    return imported("liger_kernel.ops.rms_norm:LigerRMSNormFunction").apply(x, weight, eps, 0.0, "llama", False)
