"""softmax: softmax over the last dimension."""

import torch

from popcorn.core import HALF, Float, dtypes, register_kernel
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda, on_cuda_rows, on_sm90, whole_vectors


@register_kernel(batch="token_rows", tags=("reduction",))
def softmax(x: Float["... vocab"]) -> Float["... vocab"]:
    """Softmax over the last dimension, computed in fp32 and cast back to the input dtype.

    $$y_i = \\frac{e^{x_i - \\max_j x_j}}{\\sum_{k=1}^{n} e^{x_k - \\max_j x_j}}$$
    """
    return torch.softmax(upcast(x), dim=-1).to(x.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
softmax.register("liger", source="popcorn.kernels.softmax.liger:softmax",
                 predicate=on_cuda_rows("x", max_elements=65536))  # a row in one Triton block: 64K elements


def fla_row_fits(**arguments) -> bool:
    """On CUDA, with rows of at most 64K elements. fla takes each row whole, as one block of
    next_power_of_2(vocab) elements, autotuned over num_warps: at vocab=128256 (a 131072-element block) no
    call finished within the fill's 200 s watchdog on the H200 (fla-core 0.6.0; six cases, fp32, fp16 and
    bf16), while vocab=4096 passes in seconds."""
    return on_cuda(**arguments) and arguments["x"].shape[-1] <= 65536


softmax.register("fla", source="popcorn.kernels.softmax.fla:softmax", predicate=fla_row_fits,
                 gates={"x": dtypes(*HALF, torch.float32)})  # fp32 arithmetic (no fp64)


def quack_row_fits(**arguments) -> bool:
    """On Hopper or newer, with rows of whole 16-byte vectors (quack's softmax loads them so) and at
    most 256k elements (the longest row its cluster sizes are chosen for)."""
    if not on_sm90(**arguments):
        return False
    x = arguments["x"]
    return whole_vectors(x) and x.shape[-1] <= 256 * 1024


softmax.register("quack", source="popcorn.kernels.softmax.quack:softmax", predicate=quack_row_fits,
                 gates={"x": dtypes(*HALF, torch.float32)})
