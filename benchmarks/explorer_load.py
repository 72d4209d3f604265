"""How fast the explorer's pages render on a large published report: a synthetic 100K-row report
over the real ops, then each page through Streamlit's AppTest. Prints a table.

    python benchmarks/explorer_load.py                 # 100K rows
    python benchmarks/explorer_load.py --rows 20000 --keep /tmp/report

The rows follow each op's real case plan on two devices (an H200 and an H100), for every
registered backend: statically gated pairs are ``skip`` rows, the largest cases of a stratum run
out of memory, about 1% fail; pass rows carry timings scaled from the bytes the case moves,
peak memory and correctness gauges. Timings are made up (this measures the explorer, not
kernels); everything else (cases, configs, fingerprints, schema) is what a real sweep writes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEVICES = {"NVIDIA H200": (141 << 30, 4300e9), "NVIDIA H100 80GB HBM3": (80 << 30, 3000e9)}
# backend family -> forward time relative to the reference (the reference upcasts to fp32)
SPEED = {"torch": 1.0, "compile": 0.45, "liger": 0.35, "fla": 0.38, "quack": 0.3, "sdpa": 0.2, "popcorn": 0.33}
STEP_RATIO = 2.6  # step time over forward time


def _gauges(names, rnd: random.Random, fail: bool) -> str:
    out = {}
    for name in names:
        budget = 10 ** rnd.uniform(-4, -2)
        err = budget * (rnd.uniform(3, 30) if fail else rnd.uniform(0.2, 1.5))
        out[name] = {"err": err, "budget": budget, "scale": 10 ** rnd.uniform(0, 1.5)}
    return json.dumps(out)


def synthetic_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` record dicts over the real ops' plans (see the module docstring)."""
    from popcorn.bench.plan import case_plan, estimated_bytes, gated
    from popcorn.kernels import OPS
    from popcorn.schema import REFERENCE

    rnd = random.Random(seed)
    rows = []
    for device, (memory, bandwidth) in DEVICES.items():
        for op in OPS.values():
            plan = case_plan(op, memory)
            biggest = sorted(estimated_bytes(op, p.case) for p in plan.cases)
            oom_above = biggest[int(len(biggest) * 0.97)] if biggest else math.inf
            grads = [n for n, s in op.specs.items() if s.is_float]
            for p in plan.cases:
                moved = 3 * estimated_bytes(op, p.case)
                ref_fwd = (moved / (0.3 * bandwidth) + 8e-6) * 1e3 * rnd.uniform(0.95, 1.05)
                for impl_name, impl in op.implementations.items():
                    family = impl_name.split(":")[0]
                    row = _row(op, impl_name, impl, p, device)
                    why = gated(op, impl, p)
                    if why:
                        rows.append({**row, "status": "skip", "reason": why})
                        continue
                    if estimated_bytes(op, p.case) > oom_above and impl_name == REFERENCE:
                        rows.append({**row, "status": "oom", "reason": "CUDA out of memory (fp64 truth)"})
                        continue
                    fail = rnd.random() < 0.01
                    row.update(status="fail" if fail else "pass", reps=10,
                               reason="err above max(2*budget, floor*scale)" if fail else None,
                               fwd=_gauges(["out0"], rnd, fail), bwd=_gauges(grads, rnd, False) if p.grad else None,
                               timer="cuda-graph")
                    if not fail:
                        fwd = ref_fwd * SPEED.get(family, 0.5) * rnd.uniform(0.8, 1.25)
                        step = fwd * STEP_RATIO if p.grad else None
                        mem = moved / 2**20 * (2.0 if impl_name == REFERENCE else 1.2)
                        row.update(fwd_ms=fwd, fwd_q20_ms=fwd * 0.97, fwd_q80_ms=fwd * 1.04,
                                   bwd_ms=step - fwd if step else None, step_ms=step,
                                   step_q20_ms=step * 0.97 if step else None, step_q80_ms=step * 1.04 if step else None,
                                   host_us=rnd.uniform(8, 40), fwd_mem_mb=mem, step_mem_mb=mem * 2 if step else None,
                                   ref_fwd_ms=ref_fwd, ref_step_ms=ref_fwd * STEP_RATIO if p.grad else None,
                                   ref_bwd_ms=ref_fwd * (STEP_RATIO - 1) if p.grad else None)
                    rows.append(row)
    rnd.shuffle(rows)
    return rows[:n]


def _row(op, impl_name, impl, planned, device) -> dict:
    case = planned.case
    return {"op": op.name, "impl": impl_name, "case_id": case.case_id, "case": case.label,
            "config": json.dumps(case.config(), sort_keys=True), "device": device, "torch": "2.11.0+cu130",
            "backend_version": None, "ref_hash": op.ref_hash, "impl_hash": impl.impl_hash, "grad": planned.grad,
            "ts": "2026-12-01T00:00:00+00:00", "schema": 1}


def write_report(rows: list[dict], out: Path, version: int = 1) -> Path:
    """A published report directory (CURRENT, report-vN.parquet, dispatch-vN.json) holding ``rows``."""
    import pyarrow.parquet as pq

    from popcorn.bench.publish import dispatch_table
    from popcorn.bench.record import Record, to_arrow
    from popcorn.kernels import OPS

    records = [Record(**r) for r in rows]
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(to_arrow(records), out / f"report-v{version}.parquet", compression="zstd")
    (out / f"dispatch-v{version}.json").write_text(json.dumps(dispatch_table(records, OPS, version, "synthetic")))
    (out / "CURRENT").write_text(f"{version}\n")
    return out


def _render(path: str | None, **params) -> float:
    """Seconds of one render of a page in a fresh session (AppTest); the overview when ``path`` is None.
    Another page is reached the way a browser does, after the app's first run, and only its run is timed."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "dashboards" / "app.py"), default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    if path:
        at.run()
        at.switch_page(path)
    t = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - t
    if at.exception:
        raise RuntimeError(f"{path or 'overview'}: {at.exception[0].message}")
    return seconds


def time_pages(ops: list[str], warm_runs: int = 3) -> list[tuple[str, float, float]]:
    """(page, first render s, median warm render s). The first render of the overview reads the report
    and builds the matrix; a kernel page's first decodes its op's cases; later renders find them cached,
    as a running server does."""
    pages = [("overview", None, {})] + [(f"kernel ?op={name}", "views/kernel.py", {"op": name}) for name in ops]
    pages.append(("live (nothing listening)", "views/live.py", {}))
    out = []
    for label, path, params in pages:
        first = _render(path, **params)
        out.append((label, first, statistics.median(_render(path, **params) for _ in range(warm_runs))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keep", help="write the report here (default: a temporary directory)")
    ap.add_argument("--ops", nargs="*", help="kernel pages to time (default: the op with most rows, rms_norm, attn)")
    args = ap.parse_args()

    t = time.perf_counter()
    rows = synthetic_rows(args.rows)
    made = time.perf_counter() - t
    out = Path(args.keep or tempfile.mkdtemp(prefix="popcorn-explorer-load-"))
    write_report(rows, out)
    os.environ.update(POPCORN_REPORT=str(out), POPCORN_CACHE_DIR=tempfile.mkdtemp(prefix="popcorn-empty-cache-"),
                      POPCORN_STORE=str(out / "no-store"))
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["op"]] = counts.get(r["op"], 0) + 1
    biggest = max(counts, key=counts.get)
    ops = args.ops or list(dict.fromkeys([biggest, "rms_norm", "attn"]))

    import streamlit  # noqa: F401  (imported before timing: a server has it loaded)

    import popcorn.kernels  # noqa: F401

    print(f"report: {len(rows):,} rows over {len(counts)} ops, {len(DEVICES)} devices, in {out} "
          f"(made in {made:.1f} s; largest op {biggest}: {counts[biggest]:,} rows)")
    print(f"{'page':<34} {'first s':>8} {'warm s':>8}")
    for name, first, warm in time_pages(ops):
        print(f"{name:<34} {first:>8.2f} {warm:>8.2f}")
    print("first: the first render in this process (the overview reads the report; a kernel page decodes "
          "its op's cases); warm: median of 3 later renders (cached, as a running server has them)")


if __name__ == "__main__":
    main()
