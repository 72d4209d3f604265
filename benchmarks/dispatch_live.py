"""Dispatch live: what a popcorn call costs against every backend called directly, per call shape.

For a few production shapes, forward-only and with gradients, times the popcorn call (dispatching
from the published report plus the user cache) and each backend's own callable with the harness
timer, and prints which backend dispatch chose and its time over the fastest (1.00: it picked
the best). Device time is the harness's (CUDA graphs for small kernels: dispatch's host cost is
not in it; `host us` is the host time of one call, dispatch included).

    python benchmarks/dispatch_live.py            # on the GPU
"""

from __future__ import annotations

import argparse

import torch

from popcorn.bench.timing import measure
from popcorn.core import Case
from popcorn.core.inputs import make_inputs
from popcorn.dispatch.decide import decide
from popcorn.kernels import rms_norm, softmax

# (dims, batch, dtype) per op: decode-sized, square and pretraining-sized rows of production widths
SHAPES = {
    "rms_norm": (rms_norm, "normalized_shape", [(4096, (8,), "bfloat16"), (4096, (4096,), "bfloat16"),
                                                (8192, (16384,), "bfloat16"), (4096, (4096,), "float32")]),
    "softmax": (softmax, "vocab", [(50257, (4,), "float32"), (32000, (64,), "float32"), (128256, (16,), "bfloat16")]),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(p.parse_args().device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}")
    print("op | shape | dtype | mode | chosen | chosen ms | " + " | ".join(f"{b} ms" for b in ("torch", "compile"))
          + " | chosen / fastest | popcorn host us")
    for op_name, (op, dim, shapes) in SHAPES.items():
        for size, batch, dtype in shapes:
            for grad in (False, True):
                args = make_inputs(op, Case({dim: size}, batch, dtype), device=device)
                if grad:
                    args = {k: v.requires_grad_() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
                chosen = decide(op, args, grad).impl  # what the call below memoizes
                key = "step_ms" if grad else "fwd_ms"
                direct = {b: measure(lambda _impl=op[b], **k: _impl.invoke(k), args, grad, device)[0][key]
                          for b in ("torch", "compile")}
                timing, _ = measure(lambda **k: op(**k), args, grad, device)
                ratio = timing[key] / min(direct.values())
                print(f"{op_name} | {'x'.join(map(str, (*batch, size)))} | {dtype} | "
                      f"{'step' if grad else 'forward'} | {chosen} | {timing[key]:.4f} | "
                      + " | ".join(f"{direct[b]:.4f}" for b in direct) + f" | {ratio:.2f} | {timing['host_us']:.1f}")


if __name__ == "__main__":
    main()
