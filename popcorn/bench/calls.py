"""Call plumbing shared by the correctness check and the timer: fresh argument copies, gradient
leaves, seeded cotangents and which outputs carry gradients."""

from __future__ import annotations

import torch


def outputs_of(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def prepare(arguments: dict, dtype: torch.dtype | None, grad: bool, frozen=()) -> dict:
    """A fresh copy of ``arguments``; floats cast to ``dtype`` when given, leaves requiring grad when ``grad``
    (except ``frozen`` ones: inputs a backend declares it gives no gradient to)."""
    out = {}
    for k, v in arguments.items():
        if isinstance(v, torch.Tensor):
            v = v.detach()
            v = v.to(dtype) if dtype is not None and v.is_floating_point() else v.clone()
            if grad and v.is_floating_point() and k not in frozen:
                v.requires_grad_(True)
        out[k] = v
    return out


def leaves_of(arguments: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in arguments.items() if isinstance(v, torch.Tensor) and v.requires_grad}


def cotangents(outputs: list, trial: int) -> list:
    """N(0,1) cotangents for the outputs, seeded by the trial, drawn in fp64 on the outputs' device."""
    gens: dict = {}
    out = []
    for o in outputs:
        device = o.device if isinstance(o, torch.Tensor) else torch.device("cpu")
        g = gens.get(device) or gens.setdefault(device, torch.Generator(device=device).manual_seed(10_000 + trial))
        shape = o.shape if isinstance(o, torch.Tensor) else ()
        out.append(torch.randn(shape, generator=g, dtype=torch.float64, device=device))
    return out


def graded(outputs: list) -> list[int]:
    return [i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.requires_grad]
