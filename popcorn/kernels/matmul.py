"""matmul: a (batched) matrix product in the native dtype."""

from popcorn.core import Float, register_kernel


@register_kernel(tags=("linear",))
def matmul(
    a: Float["... rows inner"],
    b: Float["inner cols"],
) -> Float["... rows cols"]:
    """Matrix product of a (with leading batch dims) and b, in the native dtype with fp32 accumulation inside torch.

    $$C_{\\ldots,i,j} = \\sum_{k=1}^{K} A_{\\ldots,i,k} B_{k,j}$$

    [torch.matmul](https://pytorch.org/docs/stable/generated/torch.matmul.html)
    """
    return a @ b
