"""embedding: a table lookup of rows of weight by index, with torch.nn.functional.embedding's call:
``embedding(input, weight)`` for indices of any shape (batch x sequence in training)."""

import math

import torch
import torch.nn.functional as F

from popcorn.core import Float, Int, register_kernel
from popcorn.core.devices import on_cuda


def indices_domain(shape, case, generator) -> torch.Tensor:
    """Row indices in [0, vocab)."""
    return torch.randint(0, case.dims["vocab"], shape, generator=generator, dtype=torch.int64)


def _rows(case) -> int:
    """The gathered tokens x hidden output, larger than the table when tokens > vocab."""
    return math.prod(case.batch) * case.dims["hidden"]


@register_kernel(batch="token_rows", workspace=_rows, inputs={"input": indices_domain}, tags=("embedding",))
def embedding(
    input: Int["..."],
    weight: Float["vocab hidden"],
) -> Float["... hidden"]:
    """Rows of the embedding table selected by integer indices of any shape.

    $$y_t = W_{i_t,:}$$

    [torch.nn.functional.embedding](https://pytorch.org/docs/stable/generated/torch.nn.functional.embedding.html)
    """
    # F.embedding, not weight[indices]: Python indexing wraps negative indices around, torch's
    # embedding rejects them (IndexError on the host, a device-side assert on CUDA: no sync)
    return F.embedding(input, weight)


# -- backends: adapters beside this file, imported on first use ------------------------------------
def liger_offsets_fit(**arguments) -> bool:
    """On CUDA, with rows to look up and offsets in int32: liger's kernel multiplies row indices by
    hidden in the indices' dtype and output positions in int32."""
    if not on_cuda(**arguments):
        return False
    input, weight = arguments["input"], arguments["weight"]
    return 0 < input.numel() and input.numel() * weight.shape[1] < 2**31 and weight.numel() < 2**31


embedding.register("liger", source="popcorn.kernels.embedding.liger:embedding", predicate=liger_offsets_fit)
