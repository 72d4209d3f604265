"""rope: rotary position embedding of queries and keys (HF Llama apply_rotary_pos_emb).

cos and sin are (seq, head_dim), one table for the whole batch, or (batch, seq, head_dim) as HF
passes them (1 broadcasts); they broadcast over the heads.
"""

import torch

from popcorn.core import Float, register_kernel
from popcorn.core.constraints import batch_broadcasts, divides, even
from popcorn.core.numerics import upcast
from popcorn.core.devices import on_cuda

ROPE_BASE = 10000.0


def _rotary_table(shape, case, generator, *, fn):
    """A real rotary table of ``shape`` = ([batch,] seq, head_dim): positions 0..seq-1 in every row."""
    *lead, seq, head_dim = shape
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[..., :head_dim]  # odd head_dim (rejected by rope) still fits
    return fn(emb).expand(*lead, seq, head_dim).clone()


def _cos(shape, case, generator):
    return _rotary_table(shape, case, generator, fn=torch.cos)


def _sin(shape, case, generator):
    return _rotary_table(shape, case, generator, fn=torch.sin)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


CONSTRAINTS = [
    even("head_dim", why="rotate_half swaps the two halves of head_dim"),
    batch_broadcasts("batch", of="cos/sin"),
    # rope rotates any head counts; the plan keeps to the grouped-query shapes attention takes
    divides("kv_heads", "q_heads", plan_only=True),
]


@register_kernel(inputs={"cos": _cos, "sin": _sin}, constraints=CONSTRAINTS, tags=("positional",))
def rope(
    q: Float["batch q_heads seq head_dim"],
    k: Float["batch kv_heads seq head_dim"],
    cos: Float["... seq head_dim"],
    sin: Float["... seq head_dim"],
) -> tuple[Float["batch q_heads seq head_dim"], Float["batch kv_heads seq head_dim"]]:
    """Rotary position embedding of queries and keys with rotate_half, as in HF Llama, computed in fp32.

    $$x' = x \\odot \\cos + \\operatorname{rotate\\_half}(x) \\odot \\sin, \\quad \\operatorname{rotate\\_half}([x_1, x_2]) = [-x_2, x_1]$$

    [Su et al., 2021](https://arxiv.org/abs/2104.09864)
    [HF Llama apply_rotary_pos_emb](https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/modeling_llama.py)
    """
    # the op's binding checked head_dim is even and cos/sin lead with none, 1 or the batch
    c = upcast(cos).reshape(-1, *cos.shape[-2:]).unsqueeze(1)  # (1 or batch, 1, seq, head_dim): every head
    s = upcast(sin).reshape(-1, *sin.shape[-2:]).unsqueeze(1)
    qf, kf = upcast(q), upcast(k)
    q_out = qf * c + _rotate_half(qf) * s
    k_out = kf * c + _rotate_half(kf) * s
    return q_out.to(q.dtype), k_out.to(k.dtype)


# -- backends: adapters beside this file, imported on first use ------------------------------------
rope.register("liger", source="popcorn.kernels.rope.liger:rope", predicate=on_cuda,
              no_grad=("cos", "sin"))  # its backward returns None for the tables
