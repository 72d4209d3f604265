"""embedding: a table lookup of rows of weight by index."""

import torch
import torch.nn.functional as F

from popcorn.core import Float, Int, register_kernel


def indices_domain(shape, case, generator) -> torch.Tensor:
    """Row indices in [0, vocab)."""
    return torch.randint(0, case.dims["vocab"], shape, generator=generator, dtype=torch.int64)


def _rows(case) -> int:
    """The gathered tokens x hidden output, larger than the table when tokens > vocab."""
    return case.dims["tokens"] * case.dims["hidden"]


@register_kernel(workspace=_rows, inputs={"indices": indices_domain}, tags=("embedding",))
def embedding(
    indices: Int["tokens"],
    weight: Float["vocab hidden"],
) -> Float["tokens hidden"]:
    """Rows of the embedding table selected by integer indices.

    $$y_t = W_{i_t,:}$$

    [torch.nn.functional.embedding](https://pytorch.org/docs/stable/generated/torch.nn.functional.embedding.html)
    """
    # F.embedding, not weight[indices]: Python indexing wraps negative indices around, torch's
    # embedding rejects them (IndexError on the host, a device-side assert on CUDA: no sync)
    return F.embedding(indices, weight)
