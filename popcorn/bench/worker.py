"""The fill worker: a long-lived process that measures one (op, backend, case) task at a time.

It stays alive across cases so imports, CUDA initialisation and compiled kernels are paid once.
Before each case it writes a sentinel naming the task; if the process dies mid-case the
supervisor turns the sentinel into a ``crash`` row for that case only. After each case it
probes the device: a poisoned CUDA context (illegal address, device assert) asks for a restart.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from pathlib import Path

import torch

from popcorn.core import Case
from popcorn.core.inputs import make_inputs

from .api import _record, run_case
from .compare import Result, describe, is_oom
from .record import ERROR, SKIP


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
