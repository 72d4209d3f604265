"""attn: softmax attention with grouped-query heads, plus torch SDPA backends.

Called like F.scaled_dot_product_attention: (batch, heads, seq, head_dim) tensors, ``is_causal`` off
by default, ``scale``; grouped-query heads as with SDPA's ``enable_gqa=True``. The tensors are named
q, k, v (not query, key, value) as in attn_varlen and rope. The plan's curves run causal (the first
declared value): that is how training calls it.
"""

import torch
from torch.nn.attention import SDPBackend

from popcorn.core import HALF, Float, dtypes, one_of, register_kernel
from popcorn.core.constraints import divides
from popcorn.core.devices import capability, on_cuda, on_sm90, whole_vectors
from popcorn.core.numerics import upcast

from . import sdpa


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
    """Attention over ``(..., heads, seq, head_dim)`` tensors, in at least fp32; the caller casts back.

    Each kv head serves ``q_heads // kv_heads`` consecutive q heads (repeat_interleave); the causal
    mask is the top-left-aligned lower triangle.
    """
    groups = q.shape[-3] // k.shape[-3]  # the op's binding checked that kv_heads divides q_heads
    qf, kf, vf = upcast(q), upcast(k), upcast(v)
    if groups > 1:
        kf = kf.repeat_interleave(groups, dim=-3)
        vf = vf.repeat_interleave(groups, dim=-3)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (qf @ kf.transpose(-2, -1)) * scale
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, dim=-1) @ vf


def _scores(case) -> int:
    """The fp32 score matrix the reference materializes: batch x q_heads x seq x seq."""
    d = case.dims
    return d["batch"] * d["q_heads"] * d["seq"] ** 2


# grouped-query attention: each kv head serves q_heads // kv_heads consecutive q heads
GQA = divides("kv_heads", "q_heads", why="each kv head serves q_heads // kv_heads consecutive q heads")

LAYOUT = ("q, k and v are (batch, heads, seq, head_dim), the layout F.scaled_dot_product_attention takes; "
          "flash-attn's (batch, seq, heads, head_dim) needs .transpose(1, 2)")


@register_kernel(workspace=_scores, args={"is_causal": [True, False], "scale": [None, 0.125]}, layout=LAYOUT,
                 constraints=[GQA], tags=("attention",))
def attn(
    q: Float["batch q_heads seq head_dim"],
    k: Float["batch kv_heads seq head_dim"],
    v: Float["batch kv_heads seq head_dim"],
    is_causal: bool = False,
    scale: float | None = None,
) -> Float["batch q_heads seq head_dim"]:
    """Scaled dot-product softmax attention with grouped-query heads and an optional causal mask, in fp32.

    $$O_h = \\operatorname{softmax}\\left(s\\, Q_h K_{g(h)}^{\\top} + M\\right) V_{g(h)}, \\quad g(h) = \\left\\lfloor h \\tfrac{H_{kv}}{H_q} \\right\\rfloor, \\quad s = d^{-1/2} \\text{ by default}, \\quad M_{ij} = -\\infty \\text{ if is\\_causal and } j > i$$

    [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    [Ainslie et al., 2023](https://arxiv.org/abs/2305.13245)
    """
    return _attention(q, k, v, is_causal, scale).to(q.dtype)


# -- torch SDPA backends (adapters in sdpa.py), each pinned through torch.nn.attention.sdpa_kernel ----
attn.register("sdpa:flash", sdpa.adapter(SDPBackend.FLASH_ATTENTION), predicate=sdpa.flash_ok)
attn.register("sdpa:efficient", sdpa.adapter(SDPBackend.EFFICIENT_ATTENTION), predicate=sdpa.efficient_ok,
              gates={"q": dtypes(*HALF, torch.float32)})
attn.register("sdpa:cudnn", sdpa.adapter(SDPBackend.CUDNN_ATTENTION), predicate=sdpa.cudnn_ok,
              gates={"q": dtypes(*HALF)})
attn.register("sdpa:math", sdpa.adapter(SDPBackend.MATH))


def fla_heads_fit(**arguments) -> bool:
    """On CUDA, with head_dim at most 256: fla's kernels hold a whole head in one block."""
    return on_cuda(**arguments) and arguments["q"].shape[-1] <= 256 and arguments["v"].shape[-1] <= 256


# -- library backends: adapters beside this file, imported on first use ----------------------------
# fla: causal only; half precision only (its dots take fp32 operands as tf32, below fp32's accuracy)
attn.register("fla", source="popcorn.kernels.attn.fla:attn", predicate=fla_heads_fit,
              gates={"is_causal": one_of(True), "q": dtypes(*HALF)})


def fa4_fits(**arguments) -> bool:
    """On Hopper (head_dim up to 256) or Blackwell (up to 128), head_dim a whole number of 16-byte vectors,
    something to attend over: what FlashAttention 4's SM90 and SM100 kernels assert."""
    if not on_sm90(**arguments):
        return False
    q, k = arguments["q"], arguments["k"]
    widest = 256 if capability(q)[0] == 9 else 128
    return q.numel() > 0 and k.numel() > 0 and q.shape[-1] <= widest and whole_vectors(q)


# fa4: 16-bit only (its fp8 path is forward-only with descales)
attn.register("fa4", source="popcorn.kernels.attn.fa4:attn", predicate=fa4_fits, gates={"q": dtypes(*HALF)})
