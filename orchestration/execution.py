"""Where a partition's fill runs: the interface every executor implements, and the local one.

A partition's asset describes its work as a :class:`FillJob` (the arguments of ``popcorn bench fill``
writing into a shard directory) and hands it to the ``executor`` resource; the executor runs it (here,
as a subprocess on this machine's device; ``orchestration.slurm.SlurmExecutor``, as a Slurm job) and
returns a :class:`FillResult`. What the job measured is in its shard directory whatever the exit code:
a job that fails part way keeps its rows, and a rerun skips them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg

STOP_GRACE_S = 60.0  # after Ctrl-C a fill writes what it measured and exits; then it is killed
PROGRESS_EVERY_S = 15.0  # the fill's progress line reaches the run's log this often
LOG_TAIL_LINES = 200
_PROGRESS = re.compile(r"^\S+: \d+/\d+ .*ETA \S+\s*$")


@dataclass(frozen=True)
class FillJob:
    """One partition's work, as ``popcorn bench fill`` arguments."""

    ops: tuple[str, ...]
    backends: tuple[str, ...]
    strata: tuple[str, ...]
    out_dir: str  # a shard directory (ShardSink) the job writes <op>.jsonl into
    limit: int | None = None
    curves_only: bool = False
    trials: int = 10
    timeout: float = 300.0
    device: str | None = None
    workers: int | None = None

    def argv(self) -> list[str]:
        """The fill's command line, run by this interpreter."""
        argv = [sys.executable, "-m", "popcorn.cli", "bench", "fill", *self.ops]
        for b in self.backends:
            argv += ["--backend", b]
        for s in self.strata:
            argv += ["--stratum", s]
        argv += ["--out", self.out_dir, "--trials", str(self.trials), "--timeout", f"{self.timeout:g}"]
        if self.limit is not None:
            argv += ["--limit", str(self.limit)]
        if self.curves_only:
            argv.append("--curves-only")
        if self.device is not None:
            argv += ["--device", self.device]
        if self.workers is not None:
            argv += ["--workers", str(self.workers)]
        return argv


@dataclass
class FillResult:
    """How a job ended: its exit code, its shard directory, the scheduler's id for it and its log's tail."""

    returncode: int
    out_dir: str
    job_id: str | None = None
    log: str = ""


class Executor(dg.ConfigurableResource):
    """Runs a partition's FillJob somewhere and waits for it."""

    def fill(self, context, job: FillJob) -> FillResult:
        raise NotImplementedError


def fills_per_gpu() -> int:
    """POPCORN_SWEEP_FILLS_PER_GPU (default 1): partitions a local sweep runs side by side on each GPU, so
    their fixed costs (a run's start, the fill's workers, compiles) overlap. Their timing stays alone on
    the device and their cases within its memory (popcorn.bench.device_lane): each fill then runs
    parallel workers, whose reservations the device's ledger counts."""
    raw = os.environ.get("POPCORN_SWEEP_FILLS_PER_GPU", "1")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"POPCORN_SWEEP_FILLS_PER_GPU={raw!r}: expected a whole number of fills, 1 or more")
    return n


class LocalExecutor(Executor):
    """Runs ``job.argv()`` as a subprocess on this machine (a crash or hang costs the job, not the run),
    :func:`fills_per_gpu` jobs per visible GPU at a time (a lease on a lock file; CPU counts as one GPU),
    streaming its output to the run's log. Stopping the run stops the fill the way Ctrl-C does: it
    writes what it measured."""

    gpus: int | None = None  # jobs side by side (default: the visible GPUs x fills_per_gpu(), 1 on CPU)
    lease_dir: str | None = None  # where the leases live (default: <tmp>/popcorn-gpu-leases)

    def fill(self, context, job: FillJob) -> FillResult:
        devices = visible_gpus() if job.device in (None, "cuda") or str(job.device).startswith("cuda") else []
        per_gpu = fills_per_gpu() if devices else 1
        slots = self.gpus or max(1, len(devices)) * per_gpu
        if per_gpu > 1 and job.workers is None:  # the host's cores are shared by the fills side by side
            job = replace(job, workers=max(2, min(8, (os.cpu_count() or 2) // (2 * per_gpu))))
        lease_dir = Path(self.lease_dir or Path(tempfile.gettempdir()) / "popcorn-gpu-leases")
        with lease(lease_dir, slots, context.log) as slot:
            env = dict(os.environ)
            if devices:
                env["CUDA_VISIBLE_DEVICES"] = devices[slot % len(devices)]
            context.log.info(f"fill on {'GPU ' + env['CUDA_VISIBLE_DEVICES'] if devices else 'CPU'}: "
                             + " ".join(job.argv()[1:]))
            rc, tail = _stream(job.argv(), env, context.log)
        return FillResult(rc, job.out_dir, None, tail)


def visible_gpus() -> list[str]:
    """This process's visible CUDA devices, as CUDA_VISIBLE_DEVICES entries (empty on a CPU machine)."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [d for d in given.split(",") if d.strip() and d.strip() != "-1"]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


@contextlib.contextmanager
def lease(directory: Path, slots: int, log):
    """Hold one of ``slots`` lock files under ``directory`` (waiting for a free one); yields its index.
    Locks die with their process, so a killed run never leaves a slot taken."""
    directory.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        for i in range(slots):
            f = open(directory / f"slot-{i}.lock", "a")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.close()
                continue
            try:
                yield i
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        if not waited:
            log.info(f"waiting for one of {slots} device slot(s) under {directory}")
            waited = True
        time.sleep(1.0)


def _stream(argv: list[str], env: dict, log) -> tuple[int, str]:
    """Run ``argv`` in its own process group, its output lines to ``log`` (the progress line every
    PROGRESS_EVERY_S); returns (exit code, the output's tail)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    last_progress = 0.0
    try:
        for line in proc.stdout:  # text mode: the progress line's \r ends a line too
            line = line.rstrip()
            if not line:
                continue
            tail.append(line)
            if _PROGRESS.match(line):
                if time.monotonic() - last_progress < PROGRESS_EVERY_S:
                    continue
                last_progress = time.monotonic()
            log.info(line)
        return proc.wait(), "\n".join(tail)
    finally:
        if proc.poll() is None:  # the run was stopped: let the fill write what it measured
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def executor_from_env() -> Executor:
    """The executor ``POPCORN_SWEEP_EXECUTOR`` names: ``local`` (default) or ``slurm``
    (``orchestration.slurm.SlurmExecutor``, configured from the environment)."""
    kind = os.environ.get("POPCORN_SWEEP_EXECUTOR", "local")
    if kind == "local":
        return LocalExecutor()
    if kind == "slurm":
        return slurm_executor()
    raise ValueError(f"POPCORN_SWEEP_EXECUTOR={kind!r}: expected 'local' or 'slurm'")


def slurm_executor() -> Executor:
    """``orchestration.slurm.SlurmExecutor()``, configured from the environment: ``popcorn sweep`` gives its
    daemon POPCORN_SWEEP_NODES and POPCORN_SWEEP_CONTAINER_IMAGE, and every run the tags popcorn/nodes and
    popcorn/container-image."""
    try:
        from orchestration.slurm import SlurmExecutor
    except ModuleNotFoundError as e:
        if e.name != "orchestration.slurm":
            raise
        raise RuntimeError("the Slurm executor (orchestration/slurm.py) is not in this checkout; "
                           "run the sweep on this machine with --local (POPCORN_SWEEP_EXECUTOR=local)") from None
    try:
        executor = SlurmExecutor.from_env()
    except ValueError as e:  # dagster-slurm names the variable it misses
        raise RuntimeError(f"POPCORN_SWEEP_EXECUTOR=slurm needs the cluster's login: {e} (README: Slurm); "
                           "or run the sweep on this machine with --local (POPCORN_SWEEP_EXECUTOR=local)") from None
    image = os.environ.get("POPCORN_SWEEP_CONTAINER_IMAGE")
    return executor.model_copy(update={"container_image": image}) if image else executor
