"""add_rms_norm on flash-linear-attention's pre-norm RMS kernel: the residual add fused in, the sum
returned beside the output."""

from fla.modules.norm.layernorm import rms_norm as fla_rms_norm


def add_rms_norm(x, residual, weight, eps):
    return fla_rms_norm(x, weight, None, residual=residual, eps=eps, prenorm=True)
