"""linear: an affine map of the last dimension with torch.nn.functional.linear's call and weight
layout, so ``F.linear(x, w, b)`` becomes ``linear(x, w, b)`` with nothing else changed."""

import math

import torch.nn.functional as F

from popcorn.core import Float, register_kernel


def _output(case) -> int:
    """The output: token rows x out_features, larger than the inputs when in_features is small."""
    return math.prod(case.batch) * case.dims["out_features"]


# primary: the bias curve runs along token rows, how training scales linear (the default is in_features)
@register_kernel(batch="token_rows", workspace=_output, primary="...", tags=("linear",))
def linear(
    input: Float["... in_features"],
    weight: Float["out_features in_features"],
    bias: Float["out_features"] | None = None,
) -> Float["... out_features"]:
    """Affine map of the last dimension by a weight stored (out_features, in_features), in the native dtype.

    $$y = x W^{\\top} + b$$

    [torch.nn.functional.linear](https://pytorch.org/docs/stable/generated/torch.nn.functional.linear.html)
    """
    return F.linear(input, weight, bias)
