"""embedding on liger-kernel's Triton lookup (liger_kernel.ops.experimental); the weight's gradient
is accumulated with atomic adds in the weight's dtype."""

from popcorn.core.imports import imported


def embedding(input, weight):
    return imported("liger_kernel.ops.experimental.embedding:LigerEmbeddingFunction").apply(weight, input)
