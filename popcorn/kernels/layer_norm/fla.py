"""layer_norm on flash-linear-attention's Triton kernel (bias optional)."""

from fla.modules.norm.layernorm import layer_norm as fla_layer_norm


def layer_norm(x, weight, bias, eps):
    return fla_layer_norm(x, weight, bias, eps=eps)
