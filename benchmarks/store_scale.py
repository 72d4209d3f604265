"""Report store at scale: merge 100K rows into a fresh Delta table, merge again with half of them
newer, read everything back, and publish. Prints one table of wall times.

    python benchmarks/store_scale.py [--rows 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from popcorn.bench.delta import ReportStore
from popcorn.bench.publish import publish
from popcorn.bench.record import Record
from popcorn.kernels import OPS


def rows(n: int, ts: str, seed: int) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        op = OPS[("rms_norm", "softmax", "layer_norm", "swiglu")[i % 4]]
        impl = ("torch", "compile")[i // 4 % 2]
        ms = rng.uniform(0.01, 5)
        out.append(Record(op=op.name, impl=impl, case_id=f"{i:012x}", case=f"case {i}",
                          config=json.dumps({"dims": {"hidden": 1 + i % 4096}}), device="NVIDIA H200",
                          torch="2.11.0", backend_version=None, ref_hash=op.ref_hash,
                          impl_hash=op.implementations[impl].impl_hash, status="pass", grad=True, reps=10,
                          fwd_ms=ms, bwd_ms=2 * ms, step_ms=3 * ms, ref_fwd_ms=ms * rng.uniform(0.5, 3), ts=ts))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000)
    n = p.parse_args().rows
    root = Path(tempfile.mkdtemp())
    store = ReportStore(str(root / "store"))
    first, second = rows(n, "2026-12-01T00:00:00+00:00", 0), rows(n // 2, "2026-12-02T00:00:00+00:00", 1)
    timings = []

    def step(name, fn):
        t = time.perf_counter()
        result = fn()
        timings.append((name, time.perf_counter() - t))
        return result

    step(f"merge {n} rows into a new table", lambda: store.merge(first))
    m = step(f"merge {n // 2} newer rows (updates)", lambda: store.merge(second))
    step(f"merge the same {n // 2} rows again (no-op)", lambda: store.merge(second))
    got = step("read every row back", lambda: store.read())
    step("publish (snapshot + dispatch table)", lambda: publish(store, OPS, root / "published", force=True))
    print(f"rows in store: {len(got)}; updated by the second merge: {m.get('num_target_rows_updated')}")
    print("step | seconds")
    for name, s in timings:
        print(f"{name} | {s:.2f}")


if __name__ == "__main__":
    main()
