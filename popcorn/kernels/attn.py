"""attn: softmax attention with grouped-query heads, plus torch SDPA backends.

Called like F.scaled_dot_product_attention: (batch, heads, seq, head_dim) tensors, ``is_causal`` off
by default, ``scale``; grouped-query heads as with SDPA's ``enable_gqa=True``. The tensors are named
q, k, v (not query, key, value) as in attn_varlen and rope. The plan's curves run causal (the first
declared value): that is how training calls it.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from popcorn.core import HALF, Float, register_kernel
from popcorn.core.constraints import divides
from popcorn.core.numerics import upcast


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


# -- torch SDPA backends, each pinned through torch.nn.attention.sdpa_kernel ----------------------

def _sdpa(backend: SDPBackend):
    """An adapter with attn's parameters running F.scaled_dot_product_attention on ``backend`` only."""
    def adapter(q, k, v, is_causal=False, scale=None):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                                  enable_gqa=q.shape[1] != k.shape[1])
    adapter.__name__ = adapter.__qualname__ = f"sdpa_{backend.name.lower()}"
    return adapter


def _flash_ok(q, **_) -> bool:
    """CUDA: fp16/bf16 with head_dim <= 256 (gated by predicate: CPU's flash kernel takes every float dtype)."""
    if q.device.type == "cuda":
        return q.dtype in HALF and q.shape[-1] <= 256
    return q.device.type == "cpu"


def _efficient_ok(q, k, **_) -> bool:
    """Memory-efficient attention: CUDA only, no enable_gqa, head_dim a multiple of 8 (fp16/bf16) or 4 (fp32)."""
    align = 8 if q.dtype in HALF else 4
    return q.device.type == "cuda" and q.shape[1] == k.shape[1] and q.shape[-1] % align == 0


def _cudnn_ok(q, **_) -> bool:
    """cuDNN attention: CUDA, head_dim <= 128 and a multiple of 8, seq > 1 (fp16/bf16, dtype gated)."""
    return q.device.type == "cuda" and q.shape[-1] <= 128 and q.shape[-1] % 8 == 0 and q.shape[-2] > 1


attn.register("sdpa:flash", _sdpa(SDPBackend.FLASH_ATTENTION), predicate=_flash_ok)
attn.register("sdpa:efficient", _sdpa(SDPBackend.EFFICIENT_ATTENTION), predicate=_efficient_ok,
              gates={"q": HALF | {torch.float32}})
attn.register("sdpa:cudnn", _sdpa(SDPBackend.CUDNN_ATTENTION), predicate=_cudnn_ok, gates={"q": HALF})
attn.register("sdpa:math", _sdpa(SDPBackend.MATH))
