"""``popcorn up``: the Dagster UI and the kernel explorer on this machine's report store, both bound to
127.0.0.1, until Ctrl-C stops both.

A store that does not exist yet is seeded with the bundled published report, so a fresh install shows
real evidence at once; a fill or a sweep then merges more into it. The sweep's Dagster instance
(``popcorn sweep``'s, :func:`orchestration.sweep.home`) is the UI's, so sweeps submitted from either
side show on both.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # workspace.yaml and dashboards/ live beside the package
READY_S = 180.0  # dagster dev loads the code location in a subprocess: slow on a small machine
STOP_GRACE_S = 20.0


def seed(store) -> int:
    """Merge the bundled published report into ``store`` when it has no table yet; the rows added."""
    if store.exists():
        return 0
    from popcorn.bench.view import published

    records = published()
    if records:
        store.merge(records)
    return len(records)


def commands(ui_port: int, explorer_port: int) -> dict[str, list[str]]:
    bindir = Path(sys.executable).parent
    return {
        "dagster": [str(bindir / "dagster"), "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1",
                    "-p", str(ui_port)],
        "explorer": [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboards" / "app.py"),
                     "--server.address", "127.0.0.1", "--server.port", str(explorer_port),
                     "--server.headless", "true", "--browser.gatherUsageStats", "false"],
    }


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop(procs: dict[str, subprocess.Popen]) -> None:
    """Ctrl-C to each process group (dagster dev and streamlit shut down cleanly on it), then kill what is left."""
    for p in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs.values():
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="popcorn up", description="Start the Dagster UI and the kernel explorer on "
                                 "this machine's report store, bound to 127.0.0.1; Ctrl-C stops both.")
    ap.add_argument("--ui-port", type=int, default=3000, help="the Dagster UI's port (default 3000)")
    ap.add_argument("--explorer-port", type=int, default=8501, help="the kernel explorer's port (default 8501)")
    args = ap.parse_args(argv)
    try:
        import streamlit  # noqa: F401
    except ModuleNotFoundError:
        print("popcorn up: the explorer needs Streamlit: pip install -e '.[dashboard]'", file=sys.stderr)
        return 2

    from popcorn.bench.delta import ReportStore
    from popcorn.bench.runner import interrupt_once

    from . import sweep

    sweep.instance()  # DAGSTER_HOME with the sweep's dagster.yaml
    store = ReportStore()
    added = seed(store)
    print(f"store: {store.uri}" + (f" (seeded with the bundled report: {added} rows)" if added else ""), flush=True)
    env = {**os.environ, "DAGSTER_HOME": str(sweep.home()), "POPCORN_STORE": store.uri}
    urls = {"dagster": f"http://127.0.0.1:{args.ui_port}", "explorer": f"http://127.0.0.1:{args.explorer_port}"}
    ready_paths = {"dagster": "/server_info", "explorer": "/_stcore/health"}
    logs = sweep.home() / "popcorn-up"
    logs.mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen] = {}
    with interrupt_once(signal.SIGTERM):  # SIGTERM stops both, as Ctrl-C does
        try:
            for name, argv_ in commands(args.ui_port, args.explorer_port).items():
                # a session of its own: Ctrl-C reaches us alone, and we stop each child the way it expects
                with open(logs / f"{name}.log", "w") as log:  # a file, not a pipe nobody drains
                    procs[name] = subprocess.Popen(argv_, env=env, cwd=ROOT, start_new_session=True,
                                                   stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + READY_S
            waiting = set(procs)
            while waiting and time.monotonic() < deadline:
                for name in sorted(waiting):
                    if procs[name].poll() is not None:
                        tail = (logs / f"{name}.log").read_text(errors="replace")[-2000:]
                        print(f"popcorn up: {name} exited with {procs[name].returncode}:\n{tail}", file=sys.stderr)
                        return 1
                    if answers(urls[name] + ready_paths[name]):
                        waiting.discard(name)
                        print(f"{'Dagster UI' if name == 'dagster' else 'kernel explorer'}: {urls[name]}", flush=True)
                time.sleep(0.5)
            if waiting:
                print(f"popcorn up: {', '.join(sorted(waiting))} did not answer within {READY_S:.0f} s", file=sys.stderr)
                return 1
            print(f"Ctrl-C stops both (their logs: {logs})", flush=True)
            while all(p.poll() is None for p in procs.values()):
                time.sleep(0.5)
            gone = next(n for n, p in procs.items() if p.poll() is not None)
            print(f"popcorn up: {gone} exited with {procs[gone].returncode}; stopping the other", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        finally:
            stop(procs)
            print("stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
