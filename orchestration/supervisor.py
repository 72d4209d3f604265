"""The process that keeps a Dagster daemon working while a sweep is active, when nothing else does.

``popcorn sweep submit`` starts it (detached: stopping the watcher or closing the terminal does not
stop the sweep) unless a daemon already serves the instance (``dagster dev``). It runs ``dagster-daemon``
for the repository's workspace while a sweep backfill is active, launches the merge of a backfill that
ended with failures, and exits when no sweep is left, stopping its daemon. ``<home>/popcorn-sweep/``
holds its state, lock and logs. Usage: ``python -m orchestration.supervisor``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository: workspace.yaml, orchestration/
POLL_S = 3.0
HEARTBEAT_FRESH_S = 75.0  # dagster daemons beat every 30 s
STOP_GRACE_S = 60.0


def state_dir(home: Path) -> Path:
    return home / "popcorn-sweep"


@contextlib.contextmanager
def submitting(home: Path):
    """Held while a sweep is launched, and while the supervisor decides to exit: never both at once."""
    state_dir(home).mkdir(parents=True, exist_ok=True)
    with open(state_dir(home) / "submit.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _state(home: Path) -> dict:
    try:
        return json.loads((state_dir(home) / "supervisor.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _write_state(home: Path, **changes) -> None:
    state = {**_state(home), **changes}
    path = state_dir(home) / "supervisor.json"
    tmp = path.with_name(f".supervisor.json.{os.getpid()}")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def supervisor_alive(home: Path) -> bool:
    """Whether a supervisor holds the instance's supervisor lock."""
    state_dir(home).mkdir(parents=True, exist_ok=True)
    with open(state_dir(home) / "supervisor.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def other_daemon(inst, home: Path) -> bool:
    """Whether a daemon this supervisor did not start beats for the instance (``dagster dev``)."""
    stopped = _state(home).get("daemon_stopped", 0.0)
    now = time.time()
    return any(now - hb.timestamp < HEARTBEAT_FRESH_S and hb.timestamp > stopped
               for hb in inst.get_daemon_heartbeats().values())


def start(home: Path, env: dict) -> None:
    """Start a detached supervisor for the instance at ``home`` (call while :func:`submitting`)."""
    log = open(state_dir(home) / "supervisor.log", "a")
    env = {**env, "DAGSTER_HOME": str(home), "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])}
    subprocess.Popen([sys.executable, "-m", "orchestration.supervisor"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_default_signals)
    log.close()


def _default_signals() -> None:
    # a process started from a script's background job inherits SIGINT ignored, and dagster maps
    # SIGTERM onto SIGINT's handling: restore both so a plain kill stops it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _daemon_command() -> list[str]:
    exe = Path(sys.executable).with_name("dagster-daemon")
    return [str(exe) if exe.exists() else "dagster-daemon", "run", "-w", str(ROOT / "workspace.yaml")]


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the daemon's code servers too
    proc.wait()


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


class Supervisor:
    """The loop's state: the instance, the daemon it runs, the backfills it has looked at."""

    def __init__(self, home: Path, inst):
        self.home, self.inst = home, inst
        self.daemon: subprocess.Popen | None = None
        self.handled: set[str] = set()
        self.started = time.time()

    def merge_what_finished(self) -> None:
        from . import sweep

        for b in sweep.sweeps(self.inst, limit=20):
            if b.status in sweep.ACTIVE or b.backfill_id in self.handled:
                continue
            self.handled.add(b.backfill_id)
            if (b.backfill_end_timestamp or 0) > self.started:
                merge = sweep.merge_after(self.inst, b)
                if merge is not None:
                    print(f"{b.backfill_id} ended {b.status.value}: merging what finished ({merge.backfill_id})",
                          flush=True)

    def keep_daemon(self) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            with open(state_dir(self.home) / "daemon.log", "a") as log:
                self.daemon = subprocess.Popen(_daemon_command(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=subprocess.STDOUT, start_new_session=True,
                                               preexec_fn=_default_signals)
            _write_state(self.home, daemon_pid=self.daemon.pid)
            print(f"dagster-daemon started (pid {self.daemon.pid})", flush=True)

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            _stop(self.daemon)
            self.daemon = None
            _write_state(self.home, daemon_stopped=time.time(), daemon_pid=None)


def main() -> int:
    from . import sweep

    home = sweep.home()
    sup = Supervisor(home, sweep.instance())
    lock = open(state_dir(home) / "supervisor.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    _write_state(home, pid=os.getpid(), started=sup.started)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while True:
            sup.merge_what_finished()
            if sweep.active(sup.inst) is not None:
                sup.keep_daemon()
            else:
                with submitting(home):  # no sweep can be launched while this one decides to go
                    if sweep.active(sup.inst) is None:
                        sup.stop_daemon()
                        _write_state(home, pid=None)
                        fcntl.flock(lock, fcntl.LOCK_UN)
                        print("no sweep is active: stopped", flush=True)
                        return 0
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        return 0
    finally:
        sup.stop_daemon()
        lock.close()


if __name__ == "__main__":
    sys.exit(main())
