"""A local sweep on 1 GPU and on every GPU of this host: wall time, scaling, per-GPU utilisation over time.

    python benchmarks/sweep_gpus.py --ops rms_norm softmax --limit 20 --out benchmarks/results/sweep_gpus

For each GPU count N (``--gpus``, default 1 and all visible): a fresh Dagster instance and store, then
``popcorn sweep submit --local --ops OPS --limit L --watch`` with CUDA_VISIBLE_DEVICES listing the first N
GPUs, while ``nvidia-smi`` samples every GPU's utilisation and memory once a second. Prints per N: wall
time, partitions run, pairs in the store, mean utilisation of each GPU while the sweep ran and the share
of samples a GPU idled (<5%) while another was busy; then the speedup T(1)/T(N) against the ideal N.
``--out DIR`` keeps ``samples-<N>.csv`` (time, gpu, util %, MiB) and ``summary.json``.

On a machine without nvidia-smi (a CPU check of the script itself: ``--fake-gpus 3``) the fills run on
the CPU under fake device ids and no utilisation is sampled.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def visible(fake: int) -> list[str]:
    if fake:
        return [str(i) for i in range(fake)]
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return [d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


class Sampler(threading.Thread):
    """``nvidia-smi`` once a second: rows of (seconds since start, gpu index, utilisation %, MiB used)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.rows: list[tuple[float, str, float, float]] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        if shutil.which("nvidia-smi") is None:
            return
        while not self.stop.wait(1.0):
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
            now = round(time.monotonic() - self.t0, 1)
            for line in csv.reader(io.StringIO(out)):
                if len(line) == 3:
                    self.rows.append((now, line[0].strip(), float(line[1]), float(line[2])))


def one_sweep(ops: list[str], devices: list[str], limit: int, phases: list[str] | None, work: Path) -> dict:
    env = {**os.environ, "DAGSTER_HOME": str(work / "home"), "POPCORN_STORE": str(work / "store"),
           "POPCORN_CACHE_DIR": str(work / "cache"), "CUDA_VISIBLE_DEVICES": ",".join(devices)}
    argv = [sys.executable, "-m", "popcorn.cli", "sweep", "submit", "--local", "--ops", *ops, "--limit", str(limit),
            "--watch"]
    if phases:
        argv += ["--phases", *phases]
    sampler = Sampler()
    sampler.start()
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    sampler.stop.set()
    sampler.join(5)
    status = subprocess.run([sys.executable, "-m", "popcorn.cli", "sweep", "status"], env=env, cwd=ROOT,
                            capture_output=True, text=True).stdout
    pairs = None
    if (work / "store").exists():
        from popcorn.bench.delta import ReportStore

        pairs = len(ReportStore(str(work / "store")).read())
    used = [r for r in sampler.rows if r[1] in devices]  # device ids as nvidia-smi indexes
    per_gpu: dict[str, list[float]] = {}
    for _, gpu, util, _ in used:
        per_gpu.setdefault(gpu, []).append(util)
    by_time: dict[float, dict[str, float]] = {}
    for t, gpu, util, _ in used:
        by_time.setdefault(t, {})[gpu] = util
    idle_while_busy = {g: round(sum(1 for u in by_time.values() if u.get(g, 0) < 5 and max(u.values()) >= 5)
                                / max(1, len(by_time)), 3) for g in per_gpu}
    return {"gpus": len(devices), "wall_s": round(wall, 1), "returncode": proc.returncode, "pairs": pairs,
            "mean_util": {g: round(statistics.mean(v), 1) for g, v in per_gpu.items()},
            "idle_while_another_busy": idle_while_busy, "samples": sampler.rows,
            "tail": (proc.stdout + proc.stderr)[-1500:], "status": status[-1500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", default=["rms_norm", "softmax"])
    ap.add_argument("--limit", type=int, default=20, help="sampled cases per partition")
    ap.add_argument("--phases", nargs="+", help="reference and backend families (default: every installed one)")
    ap.add_argument("--gpus", nargs="+", type=int, help="GPU counts to sweep on (default: 1 and all)")
    ap.add_argument("--fake-gpus", type=int, default=0, help="CPU check: this many fake device ids")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    devices = visible(args.fake_gpus)
    counts = args.gpus or sorted({1, len(devices)})
    results = []
    print(f"{'gpus':>4} {'wall s':>8} {'rc':>3} {'pairs':>6}  mean utilisation per GPU (idle while another busy)",
          flush=True)
    for n in counts:
        with tempfile.TemporaryDirectory() as tmp:
            r = one_sweep(args.ops, devices[:n], args.limit, args.phases, Path(tmp))
        results.append(r)
        util = " ".join(f"{g}:{u:.0f}%({r['idle_while_another_busy'][g]:.0%})" for g, u in sorted(r["mean_util"].items()))
        print(f"{n:>4} {r['wall_s']:>8.1f} {r['returncode']:>3} {r['pairs'] if r['pairs'] is not None else '-':>6}  "
              f"{util or '(no nvidia-smi)'}", flush=True)
        if r["returncode"]:
            print(r["tail"], flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            with open(args.out / f"samples-{n}.csv", "w", newline="") as f:
                csv.writer(f).writerows([("t_s", "gpu", "util_pct", "mem_mib"), *r["samples"]])
            (args.out / "summary.json").write_text(json.dumps([{k: v for k, v in x.items() if k != "samples"}
                                                               for x in results], indent=1))
    base = next((r for r in results if r["gpus"] == 1), None)
    if base:
        for r in results:
            if r["gpus"] > 1:
                speedup = base["wall_s"] / r["wall_s"]
                print(f"{r['gpus']} GPUs: {speedup:.2f}x of one GPU's wall time (ideal {r['gpus']}x, "
                      f"efficiency {speedup / r['gpus']:.0%})", flush=True)
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
