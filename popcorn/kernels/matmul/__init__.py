"""matmul: a (batched) matrix product in the native dtype."""

import math

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.devices import on_sm90, whole_vectors


def _product(case) -> int:
    """The output: batch x rows x cols, larger than the inputs when inner is small."""
    return math.prod(case.batch) * case.dims["rows"] * case.dims["cols"]


@register_kernel(workspace=_product, tags=("linear",))
def matmul(
    a: Float["... rows inner"],
    b: Float["inner cols"],
) -> Float["... rows cols"]:
    """Matrix product of a (with leading batch dims) and b, in the native dtype with fp32 accumulation inside torch.

    $$C_{\\ldots,i,j} = \\sum_{k=1}^{K} A_{\\ldots,i,k} B_{k,j}$$

    [torch.matmul](https://pytorch.org/docs/stable/generated/torch.matmul.html)
    """
    return a @ b


# -- backends: adapters beside this file, imported on first use ------------------------------------
def quack_fits(**arguments) -> bool:
    """On Hopper or newer, with inner and cols whole 16-byte vectors: quack's GEMMs address every operand
    through TMA, whose strides must be 16-byte multiples."""
    return on_sm90(**arguments) and whole_vectors(arguments["a"]) and whole_vectors(arguments["b"])


matmul.register("quack", source="popcorn.kernels.matmul.quack:matmul", predicate=quack_fits,
                gates={"a": dtypes(*HALF)})  # its SM90 GEMMs take 16-bit operands
