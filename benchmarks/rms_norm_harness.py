"""Harness evidence on a GPU: rms_norm.benchmark and compare() for torch vs compile.

Prints report() blocks for several shapes (bf16 and fp32, with gradients), the peak memory of
a 22K-element call, and the stability of forward timings: (p80-p20)/p50 per measurement and the
ratio of two measurements of the same call in one process. Rows go to the user cache
(POPCORN_CACHE_DIR) and, with --out, to a JSONL file.

    python benchmarks/rms_norm_harness.py --out benchmarks/results/rms_norm_harness.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from popcorn.bench import compare, report
from popcorn.kernels import rms_norm

SHAPES = [((16, 1376), torch.bfloat16), ((4096, 4096), torch.bfloat16), ((4096, 4096), torch.float32),
          ((32768, 8192), torch.bfloat16), ((8, 4096), torch.bfloat16)]


def spread(r) -> str:
    return f"{(r.fwd_q80_ms - r.fwd_q20_ms) / r.fwd_ms:.1%}" if r.fwd_ms else "-"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", help="also write the rows as JSONL here")
    p.add_argument("--trials", type=int, default=10)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}")
    rows = []
    table = []
    for shape, dtype in SHAPES:
        x = torch.randn(shape, dtype=dtype, device=device, requires_grad=True)
        w = torch.randn(shape[-1], dtype=dtype, device=device, requires_grad=True)
        label = f"{shape[0]}x{shape[1]} {str(dtype).removeprefix('torch.')}"
        print(f"\n== rms_norm.benchmark {label}, grad")
        first = rms_norm.benchmark(x, w, trials=args.trials)
        for r in first:
            report(r)
        again = rms_norm.benchmark(x, w, trials=2)  # the same call measured again, same process
        for a, b in zip(first, again):
            table.append((label, a.impl, a.timer, a.ref_fwd_ms, a.fwd_ms, b.fwd_ms, spread(a), a.fwd_mem_mb,
                          a.step_mem_mb, a.ref_fwd_mem_mb, a.host_us))
        rows += first + again
        print(f"-- compare(compile, torch) {label}")
        report(compare(lambda x, weight: rms_norm(x, weight, backend="compile"),
                       lambda x, weight: rms_norm(x, weight), {"x": x, "weight": w}), "rms_norm",
               mine="compile", reference="torch")
        del x, w
        torch.cuda.empty_cache() if device == "cuda" else None

    print("\nshape | impl | timer | torch fwd ms | fwd ms (1st) | fwd ms (2nd) | 2nd/1st | (p80-p20)/p50 "
          "| fwd MiB | step MiB | torch fwd MiB | host us")
    for label, impl, timer, ref, a, b, s, fm, sm, rm, h in table:
        ratio = f"{b / a:.3f}" if a and b else "-"
        print(f"{label} | {impl} | {timer} | {ref:.4f} | {a:.4f} | {b:.4f} | {ratio} | {s} | {fm:.3f} | "
              f"{sm:.3f} | {rm:.3f} | {h:.1f}" if a else f"{label} | {impl} | - ")
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
