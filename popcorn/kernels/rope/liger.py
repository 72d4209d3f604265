"""rope on liger-kernel's Triton kernel (rotate_half, HF Llama's layout)."""


def rope(q, k, cos, sin):
    # imported here, not at the top: the file imports (and is fingerprinted) without the library
    from liger_kernel.ops.rope import LigerRopeFunction
    return LigerRopeFunction.apply(q, k, cos, sin)
