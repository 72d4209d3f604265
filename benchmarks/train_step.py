"""End-to-end: one Llama-style decoder block's forward+backward step, popcorn against plain PyTorch.

Side by side in one process, per size: plain eager PyTorch, torch.compile of the plain block,
popcorn's block (the README's, every op dispatched) eager and compiled, and liger's patched
functions (eager and compiled) where liger-kernel is installed. Each variant is timed as the
median of interleaved rounds (CUDA events on a GPU, wall clock on the CPU), with its spread.

    python benchmarks/train_step.py                       # CPU, small sizes
    python benchmarks/train_step.py --device cuda         # Llama-3-8B-shaped block, bf16: 16 / 4096 / 16384 tokens
"""

from __future__ import annotations

import argparse
import math
import contextlib
import logging
import os
import statistics
import time

import torch
import torch.nn.functional as F

from popcorn.kernels import add_rms_norm, attn, cross_entropy, embedding, linear, rms_norm, rope, swiglu

GPU_SIZES = [(1, 16), (1, 4096), (1, 16384)]  # (batch, seq)
CPU_SIZES = [(1, 16), (1, 256)]
GPU_SHAPE = dict(hidden=4096, heads=32, kv_heads=8, inter=14336, vocab=128256)
CPU_SHAPE = dict(hidden=256, heads=8, kv_heads=2, inter=688, vocab=1024)


def popcorn_block(tokens, targets, p, cos, sin, heads, kv_heads):
    """The README's block: every op through popcorn's dispatch."""
    h = embedding(tokens, p["embed"])
    b, s, d = h.shape
    x = rms_norm(h, p["attn_norm"])
    q = linear(x, p["wq"]).view(b, s, heads, -1).transpose(1, 2)
    k = linear(x, p["wk"]).view(b, s, kv_heads, -1).transpose(1, 2)
    v = linear(x, p["wv"]).view(b, s, kv_heads, -1).transpose(1, 2)
    q, k = rope(q, k, cos, sin)
    o = attn(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
    x, h = add_rms_norm(linear(o, p["wo"]), h, p["mlp_norm"])
    h = h + linear(swiglu(linear(x, p["w_gate"]), linear(x, p["w_up"])), p["w_down"])
    logits = linear(rms_norm(h, p["final_norm"]), p["embed"])
    return cross_entropy(logits.flatten(0, 1), targets.flatten())


def _rms(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


def plain_block(tokens, targets, p, cos, sin, heads, kv_heads, rms=_rms, swi=None, ce=None):
    """The same block in plain PyTorch (HF Llama's formulation); ``rms``/``swi``/``ce`` swap in kernels."""
    h = F.embedding(tokens, p["embed"])
    b, s, d = h.shape
    x = rms(h, p["attn_norm"])
    q = F.linear(x, p["wq"]).view(b, s, heads, -1).transpose(1, 2)
    k = F.linear(x, p["wk"]).view(b, s, kv_heads, -1).transpose(1, 2)
    v = F.linear(x, p["wv"]).view(b, s, kv_heads, -1).transpose(1, 2)
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    q, k = _rotate(q, c, sn), _rotate(k, c, sn)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2).reshape(b, s, d)
    h = h + F.linear(o, p["wo"])
    x = rms(h, p["mlp_norm"])
    gate, up = F.linear(x, p["w_gate"]), F.linear(x, p["w_up"])
    h = h + F.linear(swi(gate, up) if swi else F.silu(gate) * up, p["w_down"])
    logits = F.linear(rms(h, p["final_norm"]), p["embed"])
    return (ce or F.cross_entropy)(logits.flatten(0, 1).float(), targets.flatten())


def params(shape, dtype, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    hd = shape["hidden"] // shape["heads"]

    def w(*size):
        return (torch.randn(*size, generator=g, device=device) * size[-1] ** -0.5).to(dtype).requires_grad_()

    def ones(n):
        return torch.ones(n, device=device, dtype=dtype, requires_grad=True)
    d, kv, i = shape["hidden"], shape["kv_heads"] * hd, shape["inter"]
    return {"embed": w(shape["vocab"], d), "attn_norm": ones(d), "wq": w(d, d), "wk": w(kv, d), "wv": w(kv, d),
            "wo": w(d, d), "mlp_norm": ones(d), "w_gate": w(i, d), "w_up": w(i, d), "w_down": w(d, i),
            "final_norm": ones(d)}


def rotary(seq, head_dim, dtype, device):
    inv = 10000.0 ** (-torch.arange(0, head_dim, 2, device=device).double() / head_dim)
    emb = torch.cat([torch.outer(torch.arange(seq, device=device).double(), inv)] * 2, -1)
    return emb.cos()[None].to(dtype), emb.sin()[None].to(dtype)


def liger_variants():
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return {}

    def rms(x, w, eps=1e-6):
        return LigerRMSNormFunction.apply(x, w, eps)

    def ce(logits, target):
        return LigerCrossEntropyFunction.apply(logits, target, None)[0]  # (input, target, class weight)
    return {"rms": rms, "swi": LigerSiLUMulFunction.apply, "ce": ce}


def step_rounds(variants: dict, args: tuple, device, rounds: int, bench: bool) -> dict[str, list[float] | str]:
    """Per variant, ``rounds`` timed steps, interleaved round by round so drift hits every variant alike.
    A variant that runs out of memory is reported as "OOM" and left out of the rounds."""
    def once(fn):
        fn(*args).backward()

    times: dict[str, list[float] | str] = {}
    for label, fn in variants.items():
        try:
            # bench mode measures each popcorn call's exact case on its first eager call (the user cache
            # keeps the rows), so the compiled variant traced afterwards decides from the same evidence
            with _env("POPCORN_BENCH", "1" if bench and label == "popcorn eager" else None):
                once(fn)
            once(fn)  # compile, autotune and allocate outside the timed rounds
            times[label] = []
        except torch.OutOfMemoryError:
            times[label] = "OOM"
        finally:
            for t in args[2].values():
                t.grad = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
    live = {label: fn for label, fn in variants.items() if times[label] != "OOM"}
    for _ in range(rounds):
        for label, fn in live.items():
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                once(fn)
                end.record()
                torch.cuda.synchronize()
                times[label].append(start.elapsed_time(end))
            else:
                t = time.perf_counter()
                once(fn)
                times[label].append((time.perf_counter() - t) * 1e3)
    return times


@contextlib.contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old


class Decisions(logging.Handler):
    """Collects popcorn's dispatch decisions (logged once per call signature)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, float32 on CPU")
    ap.add_argument("--tokens", default=None, help="comma-separated token counts (batch 1), e.g. 16,4096")
    ap.add_argument("--bench", action="store_true",
                    help="measure popcorn's exact calls on this device first (bench=True), as a user without "
                         "published evidence for their shapes would")
    a = ap.parse_args()
    device = torch.device(a.device)
    dtype = getattr(torch, a.dtype) if a.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    shape, sizes = (GPU_SHAPE, GPU_SIZES) if device.type == "cuda" else (CPU_SHAPE, CPU_SIZES)
    if a.tokens:
        sizes = [(1, int(n)) for n in a.tokens.split(",")]
    liger = liger_variants()
    variants = {
        "plain eager": plain_block,
        "plain compiled": torch.compile(plain_block),
        "popcorn eager": popcorn_block,
        "popcorn compiled": torch.compile(popcorn_block),
    }
    if liger:
        def liger_block(*args):
            return plain_block(*args, **liger)
        variants["liger eager"] = liger_block
        variants["liger compiled"] = torch.compile(liger_block)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}, {str(dtype).removeprefix('torch.')}, block {shape}; "
          f"liger {'installed' if liger else 'not installed'}; popcorn evidence: "
          f"{'measured here first (--bench)' if a.bench else 'the published report only'}")
    choice_rows: list[str] = []
    decisions = Decisions()
    logging.getLogger("popcorn.dispatch").addHandler(decisions)
    logging.getLogger("popcorn.dispatch").setLevel(logging.INFO)
    print("tokens | " + " | ".join(variants) + " | popcorn/best plain (eager, compiled)")
    for batch, seq in sizes:
        g = torch.Generator(device=device).manual_seed(1)
        tokens = torch.randint(0, shape["vocab"], (batch, seq), generator=g, device=device)
        targets = torch.randint(0, shape["vocab"], (batch, seq), generator=g, device=device)
        cos, sin = rotary(seq, shape["hidden"] // shape["heads"], dtype, device)
        p = params(shape, dtype, device)
        args = (tokens, targets, p, cos, sin, shape["heads"], shape["kv_heads"])
        times = step_rounds(variants, args, device, a.rounds, a.bench)
        medians, cells = {}, []
        for label, ts in times.items():
            if ts == "OOM":
                medians[label], cells = math.inf, cells + ["OOM"]
                continue
            q = statistics.quantiles(ts, n=5)
            medians[label] = statistics.median(ts)
            cells.append(f"{medians[label]:.2f} ms ({q[0]:.2f}-{q[3]:.2f})")
        best = min(medians["plain eager"], medians["plain compiled"])
        print(f"{batch * seq} | " + " | ".join(cells) +
              f" | {medians['popcorn eager'] / best:.2f}, {medians['popcorn compiled'] / best:.2f}", flush=True)
        choice_rows += [f"{batch * seq} tokens: {line}" for line in dict.fromkeys(decisions.lines)]
        decisions.lines.clear()
        del p, args
    print("popcorn's decisions per size (each call signature, eager and in the compiled graph):")
    print("\n".join(choice_rows))


if __name__ == "__main__":
    main()
