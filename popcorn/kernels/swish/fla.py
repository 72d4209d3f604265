"""swish (SiLU) on flash-linear-attention's Triton kernel."""


def swish(x):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from fla.modules.activations.ops import swish as fla_swish
    return fla_swish(x)
