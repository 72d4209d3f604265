"""The device a call runs on, and the name records give it."""

from __future__ import annotations

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
