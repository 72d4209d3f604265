"""add_rms_norm on liger-kernel's fused residual add + RMS norm (returns the output, then the sum)."""

from popcorn.core.imports import imported


def add_rms_norm(x, residual, weight, eps):
    fused = imported("liger_kernel.ops.fused_add_rms_norm:LigerFusedAddRMSNormFunction")
    return fused.apply(x, residual, weight, eps, 0.0, "llama", False)
