"""Each device's copy ceiling: the effective bandwidth of a large device-to-device copy, in GB/s.

The fair denominator for a memory-bound kernel's effective bandwidth (research/perf-anchors.md).
Only measured values: ``benchmarks/copy_ceiling.py`` on the device, its output kept in
``benchmarks/results/``. A device not listed has no ceiling drawn.
"""

from __future__ import annotations

COPY_GBS = {
    "NVIDIA H200": 4265.0,  # a 4 GiB copy, benchmarks/results/copy_ceiling_h200.txt
}


def copy_ceiling(device: str) -> float | None:
    return COPY_GBS.get(device)
