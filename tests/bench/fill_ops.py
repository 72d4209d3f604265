"""Ops for fill tests: backends that die, hang or run out of memory on chosen cases.

The fill worker imports this module by name (tests/ is on sys.path), like any kernel module.
"""

import os
import signal
import time

import torch

from popcorn.core import Backend, Float, declare_backend, register_kernel

declare_backend(Backend("toy", None))


@register_kernel(compile=False)
def toy_scale(x: Float["... hidden"], alpha: float = 2.0) -> Float["... hidden"]:
    """Scale by alpha.

    $$y = \\alpha x$$
    """
    return alpha * x


@toy_scale.register("toy:good")
def toy_good(x, alpha):
    return x * alpha


@toy_scale.register("toy:die")
def toy_die(x, alpha):
    if x.shape[-1] == int(os.environ.get("TOY_DIE_AT", "17")):
        os.kill(os.getpid(), signal.SIGKILL)
    return x * alpha


@toy_scale.register("toy:hang")
def toy_hang(x, alpha):
    if x.shape[-1] == int(os.environ.get("TOY_HANG_AT", "33")):
        time.sleep(3600)
    return x * alpha


@toy_scale.register("toy:oom")
def toy_oom(x, alpha):
    if x.shape[-1] >= int(os.environ.get("TOY_OOM_FROM", "64")):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")
    return x * alpha


# admits alpha=3.0 only: every planned case (alpha=2.0) is gated at plan time
toy_scale.register("toy:gated", lambda x, alpha: x * alpha, gates={"alpha": (3.0,)})
