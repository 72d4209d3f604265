"""Inputs for a case: seeded random tensors shaped by the op's annotations and input domains.

Float tensors are standard-normal draws (never zeros: a kernel that skips work must not look
correct); integer tensors need a domain (valid indices, cu_seqlens ...) declared on the op.
"""

from __future__ import annotations

import torch

from .case import Case
from .shapes import TensorSpec


def shape_of(spec: TensorSpec, case: Case) -> tuple[int, ...]:
    """The concrete shape ``spec`` takes in ``case``."""
    shape = []
    for token in spec.tokens:
        if token.kind == "batch":
            shape.extend(case.batch)
        elif token.kind == "literal":
            shape.append(token.k)
        elif token.kind == "derived":
            k = token.k if isinstance(token.k, int) else case.args[token.k]
            shape.append(token.derive(case.dims[token.base], k))
        else:
            shape.append(case.dims[token.text])
    return tuple(shape)


def dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use a torch dtype name such as 'bfloat16'")
    return dtype


def make_inputs(op, case: Case, seed: int = 0, device: str | torch.device = "cpu") -> dict:
    """The full argument dict of ``op`` for ``case``: tensors drawn from ``seed``, scalars from the case.

    Plain float tensors are drawn on ``device`` (large cases would spend seconds drawing on the
    host); domain functions draw on the CPU generator, so they stay device-agnostic.
    """
    device = torch.device(device)
    g = torch.Generator().manual_seed(seed)
    gd = g if device.type in ("cpu", "meta") else torch.Generator(device=device).manual_seed(seed)
    dtype = dtype_of(case.dtype)
    arguments = {}
    for name, param in op.signature.parameters.items():
        spec = op.specs.get(name)
        if spec is None:
            arguments[name] = case.args.get(name, param.default)
            continue
        if spec.optional and name not in case.present:
            arguments[name] = None
            continue
        shape = shape_of(spec, case)
        domain = op.domains.get(name)
        if domain is not None:
            value = domain(shape, case, g)
        elif spec.is_float and device.type == "meta":  # shapes only: replaying decisions on recorded cases
            value = torch.empty(shape, device=device)
        elif spec.is_float:
            value = torch.randn(shape, generator=gd, dtype=torch.float32, device=device)
        else:
            raise ValueError(f"{op.name}: non-float input '{name}' needs a domain in register_kernel(inputs=...)")
        if value.is_floating_point() and spec.is_float:
            value = value.to(dtype if dtype in spec.dtypes else next(iter(sorted(spec.dtypes, key=str))))
        arguments[name] = value.to(device)
    return arguments
