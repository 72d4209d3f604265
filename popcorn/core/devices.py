"""The device a call runs on, and the name records give it."""

from __future__ import annotations

import functools
import platform

import torch


def device_of(arguments: dict) -> torch.device:
    """The device of the call's first tensor (CPU when it has none)."""
    for v in arguments.values():
        if isinstance(v, torch.Tensor):
            return v.device
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """``torch.cuda.get_device_name`` on CUDA (e.g. 'NVIDIA H200'), ``cpu:<machine>`` on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu:{platform.machine()}"


def on_cuda(**arguments) -> bool:
    """Every tensor of the call is on a CUDA device: the predicate of backends whose Triton or CUDA
    kernels cannot run elsewhere (the call then runs another backend)."""
    tensors = [v for v in arguments.values() if isinstance(v, torch.Tensor)]
    return bool(tensors) and all(t.is_cuda for t in tensors)


def on_cuda_rows(tensor: str, *, max_elements: int | None = None, max_bytes: int | None = None):
    """``on_cuda``, and the last dim of argument ``tensor`` fits one row of a kernel that holds a whole row
    in one Triton block: at most ``max_elements`` elements or ``max_bytes`` bytes (liger's and fla's
    row kernels refuse larger rows at launch)."""
    def predicate(**arguments) -> bool:
        if not on_cuda(**arguments):
            return False
        t = arguments[tensor]
        n = t.shape[-1] if t.dim() else 1
        return (max_elements is None or n <= max_elements) and (max_bytes is None or n * t.element_size() <= max_bytes)
    predicate.__name__ = predicate.__qualname__ = f"on_cuda_rows_{tensor}"
    return predicate


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def capability(t: torch.Tensor) -> tuple[int, int]:
    """The compute capability of the CUDA device ``t`` is on (cached per device)."""
    return _capability(t.device.index)  # None: the current device


def on_sm90(**arguments) -> bool:
    """Every tensor of the call is on a CUDA device of compute capability 9.0 or newer (Hopper,
    Blackwell): the predicate of CuTe DSL kernels (quack), built and tested for those."""
    if not on_cuda(**arguments):
        return False
    return all(capability(v) >= (9, 0) for v in arguments.values() if isinstance(v, torch.Tensor))


def whole_vectors(t: torch.Tensor, dim: int = -1) -> bool:
    """The extent of ``t``'s dim ``dim`` is a whole number of 16-byte vectors: what kernels that load
    rows in 16-byte vectors (quack's), or address them through TMA, need of a contiguous dim."""
    return t.shape[dim] % (16 // t.element_size()) == 0


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` when it is contiguous and 16-byte aligned, else a copy that is: what kernels with vectorized
    row loads read (a call's strides and offsets are not part of its dispatch key, so adapters fix
    them rather than predicates declining them)."""
    if t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)
