"""matmul: a (batched) matrix product in the native dtype."""

import math

from popcorn.core import Float, register_kernel


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
