"""linear: an affine map of the last dimension with torch.nn.functional.linear's call and weight
layout, so ``F.linear(x, w, b)`` becomes ``linear(x, w, b)`` with nothing else changed."""

import math

import torch.nn.functional as F

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.devices import on_sm90, whole_vectors


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


# -- backends: adapters beside this file, imported on first use ------------------------------------
def quack_fits(**arguments) -> bool:
    """On Hopper or newer, with in_features and out_features whole 16-byte vectors: quack's GEMMs
    address every operand through TMA, whose strides must be 16-byte multiples."""
    return on_sm90(**arguments) and whole_vectors(arguments["input"]) and whole_vectors(arguments["weight"], 0)


linear.register("quack", source="popcorn.kernels.linear.quack:linear", predicate=quack_fits,
                gates={"input": dtypes(*HALF)})  # its SM90 GEMMs take 16-bit operands
