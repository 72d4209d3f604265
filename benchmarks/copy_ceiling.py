"""The device's copy ceiling: effective bandwidth of a large device-to-device copy.

The explorer draws it beside each curve's effective bandwidth (bytes an op must move / its time),
the fair denominator for a memory-bound kernel (research/perf-anchors.md: bytes read + bytes
written by ``dst.copy_(src)``, timed with CUDA events, median of the repetitions). Prints a table.

    python benchmarks/copy_ceiling.py            # on a CUDA machine
"""

from __future__ import annotations

import statistics

import torch

SIZES_GIB = (0.25, 1, 4)
REPS = 30


def copy_gbps(nbytes: int) -> tuple[float, float]:
    """(median GB/s, median ms) of ``dst.copy_(src)`` over REPS, counting bytes read and written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):  # warm-up: first-touch and clocks
        dst.copy_(src)
    times = []
    for _ in range(REPS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    ms = statistics.median(times)
    return 2 * nbytes / (ms * 1e-3) / 1e9, ms


def main() -> None:
    name = torch.cuda.get_device_name()
    print(f"device: {name}  torch {torch.__version__}")
    print(f"{'size GiB':>9} {'ms':>8} {'GB/s':>8}")
    for gib in SIZES_GIB:
        gbps, ms = copy_gbps(int(gib * (1 << 30)))
        print(f"{gib:>9} {ms:>8.3f} {gbps:>8.0f}")


if __name__ == "__main__":
    main()
