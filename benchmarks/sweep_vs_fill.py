"""A local sweep against ``bench fill`` on the same ops and plan: pairs per minute, partitions, rows.

    python benchmarks/sweep_vs_fill.py --ops matmul logsumexp --curves-only --fills-per-gpu 3 \
        --sweep-seconds 240 --fill-seconds 120 --out benchmarks/results/sweep_h200

1. ``popcorn sweep submit --local --ops OPS [--curves-only] --watch`` on a fresh Dagster instance and store
   (POPCORN_SWEEP_FILLS_PER_GPU partitions side by side per GPU). At ``--sweep-seconds`` the pairs
   measured so far are counted from the partitions' shards (rows written since the start, one per
   pair); a sweep that ends before then is merged, and ``popcorn bench check --release`` runs on its store.
2. ``popcorn bench fill OPS [--curves-only] --out DIR`` for ``--fill-seconds`` (stopped as Ctrl-C would):
   its pairs per minute on the same plan, one fill owning the device.

Prints a table; ``--out DIR`` keeps ``summary.json``, the release check's output and a tarball of the
store and shards (evidence to merge: ``popcorn bench merge``).
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestration import supervisor  # noqa: E402 - stdlib alone at import
from popcorn.bench import store  # noqa: E402


def rows_since(directory: Path, t0: float) -> list:
    """Rows under ``directory`` measured since ``t0`` (epoch seconds), one per (op, impl, case, grad)."""
    out = {}
    for f in store.jsonl_files([directory]) if directory.exists() else []:
        for r in store.read_file(f):
            if r.ts and calendar.timegm(time.strptime(r.ts[:19], "%Y-%m-%dT%H:%M:%S")) >= t0 - 1:
                out[(r.op, r.impl, r.case_id, r.grad)] = r
    return list(out.values())


def by_status(rows) -> dict:
    counts: dict = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def popcorn(args: list[str], env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "popcorn.cli", *args], env=env, cwd=ROOT, text=True,
                            start_new_session=True, **kw)


def stop(proc: subprocess.Popen, sig=signal.SIGINT, grace: float = 60) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def submit_argv(args) -> list[str]:
    if args.resume:  # the sweep an earlier call left in --work: what it did not finish, on the same instance
        return ["sweep", "resume", "--watch"]
    argv = ["sweep", "submit", "--local", "--ops", *args.ops, "--watch"] + (["--curves-only"] if args.curves_only else [])
    if args.strata:
        argv += ["--strata", *args.strata]
    if args.limit:
        argv += ["--limit", str(args.limit)]
    if args.phases:
        argv += ["--phases", *args.phases]
    return argv


def sweep(args, work: Path, env: dict) -> dict:
    argv = submit_argv(args)
    t0 = time.time()
    log = open(work / "sweep.log", "w")
    proc = popcorn(argv, env, stdout=log, stderr=subprocess.STDOUT)
    try:
        proc.wait(args.sweep_seconds)
        ended = True
    except subprocess.TimeoutExpired:
        ended = False
    wall = time.time() - t0
    shards = work / "home" / "storage" / "popcorn-sweep"
    rows = rows_since(shards, t0)
    stop(proc)
    done = []
    for kind in ("reference", "measurements"):
        for summary in (shards / kind).rglob("fill-summary.json") if (shards / kind).exists() else []:
            done.append(json.loads(summary.read_text()))
    status = subprocess.run([sys.executable, "-m", "popcorn.cli", "sweep", "status"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120).stdout
    check = None
    if ended and proc.returncode == 0:
        res = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "check", "--release"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        check = {"returncode": res.returncode, "output": res.stdout[-6000:] + res.stderr[-2000:]}
    # this instance's supervisor (and its daemon) outlive the watch: stop them with the sweep's fills
    state = supervisor.state_dir(work / "home") / "supervisor.json"
    pid = json.loads(state.read_text()).get("pid") if state.exists() else None
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    return {"ended": ended, "returncode": proc.returncode, "wall_s": round(wall, 1), "pairs": len(rows),
            "pairs_per_min": round(len(rows) / (wall / 60), 1), "by_status": by_status(rows),
            "partitions_with_a_fill": len(done), "status": status[-3000:], "release_check": check}


def fill(args, work: Path, env: dict) -> dict:
    out = work / "fill"
    argv = ["bench", "fill", *args.ops, "--out", str(out)] + (["--curves-only"] if args.curves_only else [])
    for s in args.strata or []:
        argv += ["--stratum", s]
    if args.fill_limit or args.limit:
        argv += ["--limit", str(args.fill_limit or args.limit)]
    t0 = time.time()
    proc = popcorn(argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        text, _ = proc.communicate(timeout=args.fill_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        text, _ = proc.communicate(timeout=120)
    wall = time.time() - t0
    rows = rows_since(out, t0)
    (work / "fill.log").write_text(text)
    return {"wall_s": round(wall, 1), "pairs": len(rows), "pairs_per_min": round(len(rows) / (wall / 60), 1),
            "by_status": by_status(rows), "summary": text[-1500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", nargs="+", required=True)
    ap.add_argument("--curves-only", action="store_true")
    ap.add_argument("--strata", nargs="+")
    ap.add_argument("--limit", type=int, help="cases per partition (per op for the fill)")
    ap.add_argument("--fill-limit", type=int, help="cases per op for the fill (default: --limit); the sweep's "
                    "partitions times --limit is the same number of cases, each curve's smallest points first")
    ap.add_argument("--phases", nargs="+", help="reference and backend families (default: every installed one)")
    ap.add_argument("--fills-per-gpu", type=int, default=1)
    ap.add_argument("--sweep-seconds", type=float, default=300)
    ap.add_argument("--fill-seconds", type=float, default=120, help="0: no fill")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--work", type=Path, help="keep the Dagster instance, store and shards here (default: a "
                    "fresh temporary folder): on a machine kept warm, the next call can `--resume` it")
    ap.add_argument("--resume", action="store_true", help="resume the sweep --work holds (`popcorn sweep resume "
                    "--watch` for --sweep-seconds) instead of submitting one; pairs count from this call's start")
    args = ap.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="popcorn-sweep-vs-fill-"))).resolve()  # DAGSTER_HOME must be absolute
    if args.resume and not (args.work and (work / "home").exists()):
        ap.error("--resume needs --work naming the folder of an earlier call's sweep")
    if args.work and (work / "home").exists() and not args.resume:
        ap.error(f"--work {work} already holds a sweep: add --resume to finish it, or name an empty folder")
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DAGSTER_HOME": str(work / "home"), "POPCORN_STORE": str(work / "store"),
           "POPCORN_CACHE_DIR": str(work / "cache"), "POPCORN_SWEEP_FILLS_PER_GPU": str(args.fills_per_gpu)}
    (work / "home").mkdir(exist_ok=True)
    result = {"ops": args.ops, "curves_only": args.curves_only, "strata": args.strata,
              "fills_per_gpu": args.fills_per_gpu, "sweep": sweep(args, work, env)}
    if args.fill_seconds:
        result["fill"] = fill(args, work, env)
    s, f = result["sweep"], result.get("fill")
    print(f"{'run':<8} {'wall s':>7} {'pairs':>6} {'pairs/min':>9}  rows by status")
    print(f"{'sweep':<8} {s['wall_s']:>7.0f} {s['pairs']:>6} {s['pairs_per_min']:>9.1f}  {s['by_status']}  "
          f"({'ended' if s['ended'] else 'stopped at the time limit'}; {s['partitions_with_a_fill']} partitions ran a fill)")
    if f:
        print(f"{'fill':<8} {f['wall_s']:>7.0f} {f['pairs']:>6} {f['pairs_per_min']:>9.1f}  {f['by_status']}")
    if s["release_check"]:
        print(f"release check (exit {s['release_check']['returncode']}):\n{s['release_check']['output']}")
    print(s["status"])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(result, indent=1))
        with tarfile.open(args.out / "evidence.tgz", "w:gz") as tar:
            for name in ("store", "home/storage/popcorn-sweep", "fill", "sweep.log"):
                if (work / name).exists():
                    tar.add(work / name, arcname=name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
