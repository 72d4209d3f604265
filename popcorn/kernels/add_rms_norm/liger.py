"""add_rms_norm on liger-kernel's fused residual add + RMS norm (returns the output, then the sum)."""


def add_rms_norm(x, residual, weight, eps):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "llama", False)
