"""Fill throughput, serial against parallel, and whether parallel timings agree with serial ones.

    python benchmarks/fill_throughput.py rms_norm softmax cross_entropy --limit 100 --workers 8 \
        --agree-limit 5

1. The throughput run: a fresh fill of OPS (``--limit`` cases per op, every installed backend) with
   ``--workers`` workers: pairs per minute, the timing lane's busy fraction (the device timing /
   wall) and worker seconds by phase.
2. The agreement check, on the ``--agree-limit`` sample: a serial fill, a second serial fill (the
   run-to-run spread) and a parallel fill of the same cases. Per pair timed in all three, the ratio of
   each run's forward (and step) median to the first serial run's; parallel timings agree when their
   ratios spread no wider than the serial repeat's. Beside it, not part of the check: each backend's time over
   the reference's on the same case in the same run (what dispatch ranks by), parallel and repeat against
   the first serial run. It runs after the throughput run (a device time limit then cuts the check, not the
   headline), each pair under ``--agree-timeout``.

Every fill writes to a fresh shard directory (no row is reused); ``--again`` repeats the throughput run with
the compile caches that the first one left. Prints tables, per backend the worker
seconds per pair by phase too; ``--json`` keeps them. ``--mps`` runs every fill under CUDA MPS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popcorn.bench import store  # noqa: E402
from popcorn.bench.fill import fill  # noqa: E402
from popcorn.bench.sinks import ShardSink  # noqa: E402
from popcorn.bench.summary import lane_states  # noqa: E402
from popcorn.core.settings import DEVICE_STATES  # noqa: E402
from popcorn.kernels import OPS  # noqa: E402
from popcorn.schema import REFERENCE, STATES_APART  # noqa: E402


class Quiet:
    def write(self, text):
        return len(text)

    def flush(self):
        pass


def one_fill(ops, limit: int, workers: int, trials: int, root: Path, label: str, timeout: float = 300.0) -> dict:
    out = root / label
    t0 = time.monotonic()
    summary = fill([OPS[o] for o in ops], limit=limit, trials=trials, sink=ShardSink(out), workers=workers,
                   out=Quiet(), timeout=timeout)
    wall = time.monotonic() - t0
    rows = [r for f in store.jsonl_files([out]) for r in store.read_file(f)]
    b = summary.breakdown()
    by_status: dict = {}
    for r in rows:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    return {"label": label, "workers": workers, "pairs": summary.measured, "wall_s": round(wall, 1),
            "pairs_per_min": round(summary.measured / (wall / 60), 1), "busy_fraction": round(b["busy_fraction"], 3),
            "phases_s": {k: round(v, 1) for k, v in b["phases"].items()}, "per_pair": b["per_pair"],
            "lanes": {k: round(v, 2) for k, v in (b["lanes"] or {}).items()}, "by_status": by_status,
            "retried_alone": b["retried_alone"], "idle_worker_gib": b["idle_worker_gib"], "recycled": b["recycled"],
            "states": summary.states(),
            "rows": {(r.op, r.impl, r.case_id, r.grad): r for r in rows},
            "timed_by": by_start_order(summary.worker_starts, summary.timed_by)}


def by_start_order(started: dict, timed_by: dict) -> dict:
    """Each pair's worker as its place in the fill's start order (1: the first started)."""
    order = {pid: i for i, pid in enumerate(sorted(started, key=started.get), 1)}
    return {key: order.get(pid, 0) for key, pid in timed_by.items()}


def by_worker(a: dict, p: dict, workers: dict, column: str) -> list[str]:
    """Parallel over serial ``column`` per parallel worker, in its start order: whether a worker's state (the
    CUDA contexts opened before and after its own) sets how fast it times, rather than the case."""
    out: dict = {}
    for key, ratio in ratios(a, p, column).items():
        out.setdefault(workers.get(key, 0), []).append(ratio)
    return [f"worker started #{w:<3} {len(rs):>3} pairs  median {statistics.median(rs):.3f}  "
            f"[{min(rs):.3f}-{max(rs):.3f}]" for w, rs in sorted(out.items())]


def ratios(base: dict, other: dict, column: str) -> dict:
    """Pair -> ``other``'s ``column`` over ``base``'s, for the pairs both passed and timed."""
    out = {}
    for key, r in base.items():
        o = other.get(key)
        a, b = getattr(r, column, None), getattr(o, column, None) if o is not None else None
        if a and b and r.status == o.status == "pass":
            out[key] = b / a
    return out


def by_canary(a: dict, p: dict, column: str, like: float = STATES_APART) -> tuple[dict, list[str]]:
    """Parallel over serial ``column`` split by the two rows' canaries (``canary_us``, timed in the same hold as
    the samples): whether a pair's disagreement is the device state it was timed in (like states: canaries within
    ``like``), not the fill that timed it (each run's own range of canaries is its summary's ``states``). Returns
    (state -> spread, for the JSON) and the lines to print."""
    out: dict = {}
    for key, ratio in ratios(a, p, column).items():
        ca, cp = a[key].canary_us, p[key].canary_us
        state = ("no canary" if not (ca and cp) else "like states" if abs(math.log(cp / ca)) <= like
                 else "parallel's canary faster" if cp < ca else "parallel's canary slower")
        out.setdefault(state, []).append(ratio)
    spreads = {state: spread(rs) for state, rs in sorted(out.items())}
    return spreads, [f"{state:<26} {sp['n']:>4} pairs  {column} parallel / serial {sp}" for state, sp in spreads.items()]


def speedups(rows: dict, column: str) -> dict:
    """Pair -> its ``column`` over the reference's on the same case in the same run (what dispatch ranks by),
    for the backends' pairs that passed and were timed beside a passing reference."""
    out = {}
    for (op, impl, case, grad), r in rows.items():
        ref = rows.get((op, REFERENCE, case, grad))
        if impl != REFERENCE and ref is not None and r.status == ref.status == "pass":
            a, b = getattr(r, column, None), getattr(ref, column, None)
            if a and b:
                out[(op, impl, case, grad)] = a / b
    return out


def furthest(a: dict, b: dict, p: dict, column: str, n: int = 8) -> list[str]:
    """The ``n`` pairs whose parallel ``column`` is furthest (in log) from serial run A's, with run B's beside."""
    rows = []
    for key, r in a.items():
        rb, rp = b.get(key), p.get(key)
        va, vb, vp = (getattr(x, column, None) if x is not None else None for x in (r, rb, rp))
        if va and vb and vp:
            rows.append((abs(math.log(vp / va)), r, va, vb, vp, rp.timer))
    rows.sort(key=lambda t: -t[0])
    return [f"{r.op} {r.impl} {r.case[:48]:<48} {r.timer}/{timer}  serial {va:.5f} {vb:.5f}  parallel {vp:.5f} "
            f"({vp / va:.3f}x)" for _, r, va, vb, vp, timer in rows[:n]]


def spread(rs: list[float]) -> dict:
    if not rs:
        return {"n": 0}
    logs = sorted(abs(math.log(r)) for r in rs)
    q = statistics.quantiles(rs, n=10, method="inclusive") if len(rs) > 1 else [rs[0]] * 9
    return {"n": len(rs), "median": round(statistics.median(rs), 4), "q10": round(q[0], 4), "q90": round(q[8], 4),
            "median_abs_log": round(statistics.median(logs), 4), "p90_abs_log": round(logs[max(0, math.ceil(0.9 * len(logs)) - 1)], 4)}


MPS_DIRS = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/popcorn-mps/pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/popcorn-mps/log"}


def start_mps() -> bool:
    """Start an MPS control daemon for this process and its workers (they inherit the pipe directory);
    False, saying why, when the machine cannot run one or a CUDA client cannot reach it."""
    import atexit
    import subprocess

    if shutil.which("nvidia-cuda-mps-control") is None:
        print("--mps: nvidia-cuda-mps-control is not on PATH", file=sys.stderr)
        return False
    for d in MPS_DIRS.values():
        Path(d).mkdir(parents=True, exist_ok=True)
    os.environ.update(MPS_DIRS)
    start = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, text=True)
    atexit.register(lambda: subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True,
                                           capture_output=True))
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.ones(1, device='cuda').item())"],
                           capture_output=True, text=True, timeout=120)
    if start.returncode or probe.returncode:
        print(f"--mps: the daemon did not serve a client (start {start.returncode}: {start.stderr.strip()}; "
              f"client: {probe.stderr.strip()[-500:]})", file=sys.stderr)
        return False
    print("CUDA MPS daemon started for these fills", flush=True)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--agree-limit", type=int, default=5, help="cases per op of the agreement check (0: skip)")
    ap.add_argument("--agree-timeout", type=float, default=60, help="the agreement fills' watchdog per pair (s): a "
                    "pair that does not finish is left out of the comparison instead of holding a serial fill")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--seconds", type=float, help="stop the throughput run after this long (as Ctrl-C would) and "
                    "report what it measured: a device time limit then costs nothing")
    ap.add_argument("--again", type=float, metavar="SECONDS", help="then fill the same plan again into fresh shards "
                    "for this long: the same work with inductor's and Triton's caches warm (what compiles cost)")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--keep", type=Path, help="copy each run's shards here (DIR/<run>/<op>.jsonl): evidence to merge")
    ap.add_argument("--shared-holds", type=int, metavar="N", help="grant at most N shared-lane holds at once "
                    "(POPCORN_SHARED_HOLDS): whether fewer processes time-slicing the device gets more done")
    ap.add_argument("--state", choices=DEVICE_STATES, help="POPCORN_DEVICE_STATE for every fill: "
                    "the device state timings are taken in (popcorn.bench.device_state)")
    ap.add_argument("--reprimes", type=int, metavar="N", help="POPCORN_REPRIMES for every fill: re-primes in a row "
                    "that fail before a worker stops restoring the primed state (0: the first hold's alone)")
    ap.add_argument("--mps", action="store_true", help="run the parallel fills under CUDA MPS (started here as "
                    "root, stopped at the end): the workers' kernels share the device instead of time-slicing it")
    args = ap.parse_args()
    if args.shared_holds is not None:
        os.environ["POPCORN_SHARED_HOLDS"] = str(args.shared_holds)
    if args.state:
        os.environ["POPCORN_DEVICE_STATE"] = args.state
    if args.reprimes is not None:
        os.environ["POPCORN_REPRIMES"] = str(args.reprimes)
    if args.mps and not start_mps():
        return 2
    root = Path(tempfile.mkdtemp(prefix="popcorn-throughput-"))
    runs: list[dict] = []
    agreement: dict = {}

    def done(run: dict) -> dict:
        """Report a run as soon as it ends: a later run cut short by the device's time limit loses nothing."""
        runs.append(run)
        print(f"{run['label']:<22} {run['workers']:>7} {run['pairs']:>6} {run['wall_s']:>7.0f} "
              f"{run['pairs_per_min']:>9.1f} {run['busy_fraction']:>5.0%}  "
              + " ".join(f"{k}={v:.0f}" for k, v in run["phases_s"].items()), flush=True)
        print(f"{'':<22} rows by status: {run['by_status']}; OOMs retried alone: {run['retried_alone']}; "
              f"idle worker GiB (median, max of their peaks): {run['idle_worker_gib']}; workers stopped for holding too "
              f"much: {run['recycled']}", flush=True)
        if run["lanes"]:
            print(f"{'':<22} {lane_states(run['lanes'])}", flush=True)
        if run["states"]:
            print(f"{'':<22} {run['states']}", flush=True)
        for impl, c in run["per_pair"].items():  # where each backend's worker time goes, per pair
            print(f"{'':<22} {impl:<10} {c['pairs']:>5} pairs, s/pair: "
                  + " ".join(f"{k}={c[k]:.2f}" for k in c if k != "pairs"), flush=True)
        if args.keep:
            for f in store.jsonl_files([root / run["label"]]):
                (args.keep / run["label"]).mkdir(parents=True, exist_ok=True)
                shutil.copy(f, args.keep / run["label"] / f.name)
        write_json()
        return run

    def write_json() -> None:
        if args.json:
            args.json.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k not in ("rows", "timed_by")}
                                                      for r in runs],
                                             "agreement": agreement}, indent=1))

    print(f"{'run':<22} {'workers':>7} {'pairs':>6} {'wall s':>7} {'pairs/min':>9} {'busy':>5}  phases (worker s)",
          flush=True)
    if not args.skip_throughput:
        stop = threading.Timer(args.seconds or math.inf, os.kill, (os.getpid(), signal.SIGINT))
        stop.daemon = True
        if args.seconds:
            stop.start()
        done(one_fill(args.ops, args.limit, args.workers, args.trials, root, f"parallel-{args.workers}"))
        stop.cancel()
        if args.again:
            stop = threading.Timer(args.again, os.kill, (os.getpid(), signal.SIGINT))
            stop.daemon = True
            stop.start()
            done(one_fill(args.ops, args.limit, args.workers, args.trials, root, f"parallel-{args.workers}-warm"))
            stop.cancel()
    if args.agree_limit:
        a = done(one_fill(args.ops, args.agree_limit, 1, args.trials, root, "serial-a", args.agree_timeout))
        b = done(one_fill(args.ops, args.agree_limit, 1, args.trials, root, "serial-b", args.agree_timeout))
        p = done(one_fill(args.ops, args.agree_limit, args.workers, args.trials, root, f"agree-parallel-{args.workers}",
                          args.agree_timeout))
        for column in ("fwd_ms", "step_ms", "host_us"):
            agreement[column] = {"serial repeat / serial": spread(list(ratios(a["rows"], b["rows"], column).values())),
                                 "parallel / serial": spread(list(ratios(a["rows"], p["rows"], column).values()))}
            if column != "host_us":  # the time over the reference's, one case in one run: what dispatch ranks by
                sa, sb, sp = (speedups(r["rows"], column) for r in (a, b, p))
                agreement[column] |= {
                    f"over {REFERENCE}: repeat / serial": spread([sb[k] / v for k, v in sa.items() if k in sb]),
                    f"over {REFERENCE}: parallel / serial": spread([sp[k] / v for k, v in sa.items() if k in sp])}
        for column, sides in agreement.items():
            print(f"\n{column}: ratio to the first serial run, per pair timed in every run")
            for name, sp in sides.items():
                print(f"  {name:<34} {sp}")
            rep, par = sides["serial repeat / serial"], sides["parallel / serial"]  # the check is on the times
            if rep.get("n") and par.get("n"):
                # parallel timings agree when their typical deviation from serial ones is within the
                # deviation a second serial run shows for most pairs (floor: 2%)
                ok = par["median_abs_log"] <= max(rep["p90_abs_log"], 0.02)
                sides["agrees"] = ok
                print(f"  parallel agrees with serial within the run-to-run spread: {'yes' if ok else 'NO'}", flush=True)
        write_json()  # the agreement comes after the last run's report
        print("\nforward times furthest apart, parallel against serial (ms; what the disagreement is made of):")
        for line in furthest(a["rows"], b["rows"], p["rows"], "fwd_ms"):
            print("  " + line, flush=True)
        print("\nforward, parallel / serial, by the state the canary says each side was timed in:")
        agreement["fwd_ms by canary"], lines = by_canary(a["rows"], p["rows"], "fwd_ms")
        for line in lines:
            print("  " + line, flush=True)
        write_json()
        print("\nforward, parallel / serial, by the parallel worker that timed it:")
        for line in by_worker(a["rows"], p["rows"], p["timed_by"], "fwd_ms"):
            print("  " + line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
