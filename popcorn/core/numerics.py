"""Numerics shared by references: upcast the way torch training code does, never downcast fp64."""

from __future__ import annotations

import torch


def upcast(t: torch.Tensor) -> torch.Tensor:
    """``t`` in at least fp32: 16-bit floats go to fp32; fp32 and the fp64 truth run stay as they are."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t
