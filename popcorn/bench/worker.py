"""The fill worker: a long-lived process that measures one (op, backend, case) task at a time.

It stays alive across cases so imports, CUDA initialisation and compiled kernels are paid once.
Before each case it writes a sentinel naming the task; if the process dies mid-case the
supervisor turns the sentinel into a ``crash`` row for that case only. After each case it
probes the device: a poisoned CUDA context (illegal address, device assert) asks for a restart.

:class:`Worker` is the supervisor's handle on one such process (:mod:`popcorn.bench.runner`
drives it); :func:`serve` and :func:`measure_task` run inside it.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import time
import warnings
from pathlib import Path

import torch

from popcorn.core import Case
from popcorn.core.inputs import make_inputs

from .api import _record, run_case
from .compare import Result, describe, is_oom
from .record import CRASH, ERROR, SENTINEL_REASON, SKIP, Record


def resolve_op(task: dict):
    """The Op a task names: attribute ``op`` of module ``module`` (the op's own kernel module)."""
    return getattr(importlib.import_module(task["module"]), task["op"])


def probe(device: torch.device) -> bool:
    """True when the device still runs work (False: the context is poisoned)."""
    if device.type != "cuda":
        return True
    try:
        return torch.zeros(1, device=device).add_(1).item() == 1.0
    except Exception:  # noqa: BLE001
        return False


def measure_task(task: dict, device: torch.device) -> dict:
    """Run one task: {"op", "module", "impl", "config", "grad", "trials"} -> a Record dict."""
    op = resolve_op(task)
    impl = op[task["impl"]]
    case = Case.from_config(task["config"])
    grad = task["grad"]
    first = {}

    def draw(trial: int) -> dict:
        if trial == 0:
            first.setdefault("args", make_inputs(op, case, seed=0, device=device))
            return first["args"]
        return make_inputs(op, case, seed=trial, device=device)

    try:
        reason = impl.rejects(draw(0), grad)
    except Exception as e:  # noqa: BLE001 - inputs that cannot be made are the harness's problem
        return _record(op, impl, case, Result(ERROR, f"inputs: {describe(e)}", grad=grad), device, {}).to_dict()
    if reason:
        result = Result(SKIP, reason, grad=grad)
    else:
        result = run_case(op, impl, case, draw, grad, device, trials=task["trials"], timing=True)
    return _record(op, impl, case, result, device, {}).to_dict()


def serve(conn, sentinel: str, device: str) -> None:
    """Worker loop: receive tasks on ``conn`` until None; reply (record dict, device_ok)."""
    dev = torch.device(device)
    # each distinct warning once per worker: inductor repeats its own on every compile and would
    # bury the progress bar
    warnings.simplefilter("once")
    import popcorn.kernels  # noqa: F401 - pay the imports before the first case's watchdog starts

    probe(dev)
    conn.send(("ready", os.getpid()))
    path = Path(sentinel)
    while True:
        task = conn.recv()
        if task is None:
            break
        path.write_text(json.dumps(task))
        try:
            row = measure_task(task, dev)
        except BaseException as e:  # noqa: BLE001 - report, never die silently
            row = {"error": describe(e), "oom": is_oom(e)}
        ok = probe(dev)
        path.unlink(missing_ok=True)
        conn.send((row, ok))


# -- the supervisor's side -------------------------------------------------------------------------

class Worker:
    """One supervised worker process and its pipe."""

    def __init__(self, device: torch.device, sentinel_dir: Path):
        ctx = mp.get_context("spawn")  # never fork a process that may hold a CUDA context
        self.device = str(device)
        self.conn, child = ctx.Pipe()
        sentinel_dir.mkdir(parents=True, exist_ok=True)
        self.sentinel = sentinel_dir / f"sentinel-{os.getpid()}-{time.monotonic_ns()}.json"
        self.proc = ctx.Process(target=serve, args=(child, str(self.sentinel), self.device), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(600) or self.conn.recv()[0] != "ready":
            self.kill()
            raise RuntimeError("the fill worker did not start within 600 s")

    def run(self, task: dict, timeout: float):
        """(record dict, device ok) or raises TimeoutError / EOFError (worker died)."""
        self.conn.send(task)
        if not self.conn.poll(timeout):
            raise TimeoutError
        return self.conn.recv()

    def death_row(self) -> Record | None:
        """The crash row for the case named by the dead worker's sentinel; None when it died between
        cases (killed while idle): that costs no row, only a fresh worker."""
        self.proc.join(5)
        code = self.proc.exitcode
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        task = json.loads(self.sentinel.read_text()) if self.sentinel.exists() else None
        self.kill()
        return None if task is None else crash_row(task, f"worker died ({how}) during the case")

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        self.sentinel.unlink(missing_ok=True)

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.join(10)
        except (BrokenPipeError, OSError):
            pass
        self.kill()


def row_from(op, impl: str, case: Case, grad: bool, status: str, reason: str, device: torch.device) -> Record:
    """A row the harness never produced (crash, timeout, a worker error): status and reason alone."""
    return _record(op, op[impl], case, Result(status, reason, grad=grad), device, {})


def crash_row(task: dict, reason: str) -> Record:
    op = resolve_op(task)
    case = Case.from_config(task["config"])
    device = torch.device(task.get("device", "cuda" if torch.cuda.is_available() else "cpu"))
    return row_from(op, task["impl"], case, task["grad"], CRASH, reason, device)


def orphaned_sentinels(sentinel_dir: Path) -> list[Record]:
    """Crash rows for sentinels left by fills whose supervisor died too (e.g. the machine was killed)."""
    rows = []
    for path in sorted(sentinel_dir.glob("sentinel-*.json")) if sentinel_dir.exists() else ():
        pid = int(path.name.split("-")[1])
        try:
            os.kill(pid, 0)
            continue  # its supervisor still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            rows.append(crash_row(json.loads(path.read_text()), SENTINEL_REASON))
        except (ValueError, KeyError, ImportError, AttributeError):
            pass  # not ours to judge; leave nothing half-read behind
        path.unlink(missing_ok=True)
    return rows
