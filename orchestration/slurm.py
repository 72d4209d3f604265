"""Run a partition's fill as a Slurm job through dagster-slurm.

:class:`SlurmExecutor` submits one :class:`~orchestration.execution.FillJob` as one batch job with
dagster-slurm's ``ComputeResource(mode="slurm")`` and its SSH, queue and polling configuration
(:class:`dagster_slurm.SlurmResource`): dagster-slurm uploads the payload
(``payloads/slurm_fill.py``), submits it with ``sbatch``, follows it with ``squeue``/``sacct`` and
relays the payload's Pipes messages, so the fill's output streams into the Dagster run log.

- **GPUs.** One per job (``--gres=gpu:1``) when the partition has GPUs, none on CPU partitions
  (``gpus_per_task`` overrides). Partition, account, QOS, memory and CPUs come from
  ``slurm.queue``; the time limit from ``time_limit`` (default ``slurm.queue.time_limit``).
- **Environments.** Each backend family with an install extra (liger, fla, quack, cudnn, fa4, unsloth) runs in
  its own virtual environment, ``<env_root>/<family>-<key>``; backends without one share ``base``.
  The key hashes what the environment is made of: ``pyproject.toml``, the extras, the base
  interpreter, the pip arguments and the container image. An environment is built once, under a
  lock, the first time a job needs it, and reused while its key is unchanged; a change of any input
  builds a new one beside it. It overlays the base interpreter's packages (torch, from a container
  image or a base environment) and installs the checkout editable with the family's extra on top,
  so code changes need no rebuild. ``pre_deployed_env_path`` skips all of that and runs every job
  in one environment prepared by hand (dagster-slurm's production layout: ``activate.sh`` and
  ``env/bin/python``). Backends an environment cannot load are skipped by the fill, which says why;
  the result lists those reasons and the run log warns of them.
- **Container image.** With ``container_image`` set, the environment build and the fill run in the
  image through Pyxis (``srun --container-image``); the image is part of every environment's key.
  The batch script and payload stay on the host and need ``driver_env_path`` (an environment with
  dagster-pipes in dagster-slurm's layout).
- **Walltime.** At the time limit Slurm sends SIGTERM to every process of the job and SIGKILL
  ``KillWait`` seconds later (30 by default). The fill treats SIGTERM as Ctrl-C: it writes every
  finished row to the shard and exits at the case in flight; its worker outlives the signal, so the
  case in flight leaves no false crash row. The job ends ``TIMEOUT``: the result says so, and the
  executor resubmits the same job (``max_resubmits`` times; each job sees its attempt number as
  ``POPCORN_SLURM_ATTEMPT``), which skips every case the shard holds.
  No ``--signal`` is sent by default (``slurm.queue.signal_before_timeout`` adds one, for clusters
  whose KillWait is too short to write the rows; the fill then drains early and the job ends
  ``FAILED`` with exit code 130, also resubmitted).

The shard directory (``FillJob.out_dir``) must be on a filesystem both the Dagster process and the
compute nodes see (the cluster's home or scratch), as must ``project_dir``, the checkout the
environments install.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from dagster_slurm import BashLauncher, ComputeResource, SlurmResource
from dagster_slurm.helpers.ssh_pool import SSHConnectionPool
from pydantic import Field, PrivateAttr

from .execution import Executor, FillJob, FillResult

PAYLOAD = Path(__file__).parent / "payloads" / "slurm_fill.py"
PROJECT = Path(__file__).resolve().parents[1]  # the checkout this code location runs from
ENV_LAYOUT = 1  # bump when the environment build below changes: every key changes with it
DRAINED = 130  # the fill's exit code after SIGTERM or Ctrl-C: finished rows written, the rest not started

_ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT"}
# what `bench fill` prints for a backend it cannot run (popcorn.bench.tasks.backends_for)
_SKIPPED = re.compile(r"^[\w.]+: (backend '.+|none of .+ is installed.*)$")


@dataclass
class SlurmFillResult(FillResult):
    """A FillResult with what Slurm said: ``state`` of the last job (COMPLETED, TIMEOUT, FAILED,
    CANCELLED, ...), every job submitted for the partition (``attempts``: job id, state, fill exit code,
    rows in the shard afterwards), the environment used and the backends the fill skipped, with why."""

    state: str = ""
    attempts: list[dict] = field(default_factory=list)
    environment: str = ""
    skipped: list[str] = field(default_factory=list)

    @property
    def timed_out(self) -> bool:
        """The last job was stopped by its time limit before the fill ended: the partition is incomplete
        (its finished rows are kept). A fill that ended while its job ran out of time closing is complete,
        though ``state`` says TIMEOUT."""
        return bool(self.attempts) and self.attempts[-1]["drained"]

    @property
    def drained(self) -> bool:
        """Some job of this partition was stopped by its walltime and drained."""
        return any(a["drained"] for a in self.attempts)


class SlurmExecutor(Executor):
    """Runs each FillJob as one Slurm batch job through dagster-slurm (see the module's docstring)."""

    slurm: SlurmResource = Field(description="dagster-slurm's cluster config: SSH login node, queue defaults "
                                 "(partition, account, qos, cpus, mem), remote_base, polling")
    time_limit: str | None = Field(default=None, description="walltime per job (default slurm.queue.time_limit)")
    gpus_per_task: int | None = Field(default=None, description="GPUs per job; unset: 1 when the partition "
                                      "has GPUs (sinfo's GRES), 0 on CPU partitions")
    max_resubmits: int = Field(default=3, description="resubmissions of a partition whose job hit its walltime")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of every job")
    env_root: str | None = Field(default=None, description="where per-family environments live on the "
                                 "cluster (default <remote_base or $HOME>/popcorn-envs)")
    pre_deployed_env_path: str | None = Field(default=None, description="one hand-made environment for every "
                                              "job (activate.sh, env/bin/python); no environments are built")
    base_python: str = Field(default="python3", description="interpreter whose packages (torch) every "
                             "environment overlays; inside the container image when one is set")
    pip_args: list[str] = Field(default_factory=list, description="extra pip install arguments "
                                "(index URLs, constraints, --no-build-isolation)")
    project_dir: str | None = Field(default=None, description="the popcorn checkout as the cluster sees it "
                                    "(default: this checkout)")
    container_image: str | None = Field(default=None, description="Pyxis image every build and fill runs in, "
                                        "e.g. nvcr.io#nvidia/pytorch:25.09-py3")
    container_mounts: list[str] = Field(default_factory=list, description="Pyxis --container-mounts entries "
                                        "(the shard, environment and project directories must be visible)")
    driver_env_path: str | None = Field(default=None, description="with a container image: the host "
                                        "environment (dagster-pipes) the payload runs in")
    build_timeout_s: int = Field(default=3600, description="seconds an environment build may take")
    poll_timeout_s: int = Field(default=7 * 24 * 3600, description="seconds to follow one job")

    _gpus: int | None = PrivateAttr(default=None)

    @classmethod
    def from_env(cls, **overrides) -> "SlurmExecutor":
        """dagster-slurm's ``SlurmResource.from_env()`` (SLURM_SSH_HOST, SLURM_SSH_USER, SLURM_SSH_KEY,
        SLURM_PARTITION, SLURM_TIME, SLURM_CPUS, SLURM_MEM, SLURM_ACCOUNT, SLURM_QOS, SLURM_REMOTE_BASE, ...)
        plus POPCORN_SLURM_* for the fields here (README: "Slurm: pointing the executor at a cluster")."""
        import os

        env = os.environ
        fields = {
            "gpus_per_task": ("POPCORN_SLURM_GPUS_PER_TASK", int),
            "max_resubmits": ("POPCORN_SLURM_MAX_RESUBMITS", int),
            "env_root": ("POPCORN_SLURM_ENV_ROOT", str),
            "pre_deployed_env_path": ("POPCORN_SLURM_PRE_DEPLOYED_ENV", str),
            "base_python": ("POPCORN_SLURM_BASE_PYTHON", str),
            "pip_args": ("POPCORN_SLURM_PIP_ARGS", shlex.split),
            "project_dir": ("POPCORN_SLURM_PROJECT_DIR", str),
            "container_image": ("POPCORN_SLURM_CONTAINER_IMAGE", str),
            "container_mounts": ("POPCORN_SLURM_CONTAINER_MOUNTS", lambda v: [m for m in v.split(",") if m]),
            "driver_env_path": ("POPCORN_SLURM_DRIVER_ENV", str),
        }
        config = {k: parse(env[var]) for k, (var, parse) in fields.items() if env.get(var, "").strip()}
        return cls(slurm=SlurmResource.from_env(), **{**config, **overrides})

    # -- the interface ---------------------------------------------------------------------------

    def fill(self, context, job: FillJob) -> SlurmFillResult:
        attempts: list[dict] = []
        environment = ""
        compute = None
        try:
            for n in range(self.max_resubmits + 1):
                environment, compute, attempt = self._submit(context, job, n + 1)
                attempts.append(attempt)
                if not attempt["drained"]:
                    break
                if n < self.max_resubmits:
                    context.log.warning(
                        f"Slurm job {attempt['job_id']} stopped at its walltime ({attempt['state']}); the shard "
                        f"holds {attempt['rows']} rows; resubmitting the rest ({n + 2} of {self.max_resubmits + 1})")
                    self._forget_messages(context, compute)
        finally:
            if compute is not None:  # the step's remote run directory, kept while jobs were resubmitted
                try:
                    compute.cleanup_deferred_run_dir(context)
                except Exception as e:  # noqa: BLE001 - best effort
                    context.log.debug(f"could not remove the remote run directory: {e}")
        last = attempts[-1]
        logs = [_read(Path(job.out_dir) / ".slurm" / f"{a['job_id']}.log") for a in attempts]
        skipped = sorted({m.group(0) for text in logs for line in text.splitlines()
                          if (m := _SKIPPED.match(line.strip()))} | {p for a in attempts for p in a["problems"]})
        for line in skipped:
            context.log.warning(f"skipped on the cluster: {line}")
        if last["drained"]:
            context.log.warning(f"partition incomplete after {len(attempts)} job(s): the last, "
                                f"{last['job_id']}, also hit its walltime; materialize it again to go on")
        return SlurmFillResult(returncode=last["returncode"], out_dir=job.out_dir, job_id=last["job_id"],
                               log="".join(logs), state=last["state"], attempts=attempts, environment=environment,
                               skipped=skipped)

    # -- one job ---------------------------------------------------------------------------------

    def _submit(self, context, job: FillJob, attempt: int = 1) -> tuple[str, ComputeResource, dict]:
        """One Slurm job for ``job``, the ``attempt``-th for it in this step (the job sees it as
        POPCORN_SLURM_ATTEMPT): (environment, the dagster-slurm resource, what came of it)."""
        if self.container_image and not self.driver_env_path:
            raise ValueError("a container image runs the fill in the image, but the batch script and its payload "
                             "on the host: set driver_env_path (an environment with dagster-pipes: activate.sh, "
                             "env/bin/python)")
        outcomes = Path(job.out_dir) / ".slurm"
        outcomes.mkdir(parents=True, exist_ok=True)
        before = set(outcomes.glob("*.json"))
        with SSHConnectionPool(self.slurm.ssh) as pool:
            gpus = self.gpus(pool)
            environment, problems = self.environment(context, pool, job)
        launcher_env = self.driver_env_path if self.container_image else environment
        compute = ComputeResource(mode="slurm", slurm=self.slurm, default_launcher=BashLauncher(),
                                  pre_deployed_env_path=launcher_env)
        opts: dict = {"gpus_per_node": gpus, "nodes": 1}
        if self.time_limit:
            opts["time_limit"] = self.time_limit
        extras = {"argv": job.argv(), "out_dir": str(job.out_dir), "prefix": self._container_prefix(gpus),
                  "python": f"{environment}/env/bin/python" if self.container_image else None}
        error: Exception | None = None
        try:
            compute.run(context=context, payload_path=str(PAYLOAD), extra_slurm_opts=opts, extras=extras,
                        extra_env={"PYTHONUNBUFFERED": "1", "POPCORN_SLURM_ATTEMPT": str(attempt), **self.env},
                        poll_timeout=self.poll_timeout_s,
                        defer_cleanup=True)
        except Exception as e:  # noqa: BLE001 - dagster-slurm raises for every state but COMPLETED
            error = e
        new = sorted(set(outcomes.glob("*.json")) - before, key=lambda p: p.stat().st_mtime)
        outcome = json.loads(new[-1].read_text()) if new else {}
        job_id = outcome.get("job_id") or _job_id_in(error)
        if job_id is None:  # nothing was submitted (SSH, environment, submission): a real failure
            raise error if error is not None else RuntimeError("the Slurm job left no outcome and no job id")
        with SSHConnectionPool(self.slurm.ssh) as pool:
            for _ in range(5):  # accounting may lag the end of the job by a moment
                state, exit_code = _final_state(pool, job_id, error)
                if state not in _ACTIVE:
                    break
                time.sleep(2)
        if state in _ACTIVE:  # dagster-slurm detached (the Dagster process was told to stop): the job goes on
            raise error if error is not None else RuntimeError(f"Slurm job {job_id} is still {state}")
        returncode = outcome.get("returncode", exit_code)
        returncode = -1 if returncode is None else returncode  # the payload was killed before saying
        # stopped before its end by the walltime, by preemption or by a pre-timeout signal, never by scancel (a
        # person's word); a fill that ended (exit 0) while its job ran out of time closing is complete
        drained = returncode != 0 and (state in ("TIMEOUT", "PREEMPTED") or (
            state != "CANCELLED" and returncode == DRAINED and bool(outcome.get("signals"))))
        rows = _rows(Path(job.out_dir))
        if error is not None and not drained:
            context.log.error(f"Slurm job {job_id} ended {state} (fill exit code {returncode}): {error}")
        context.log.info(f"Slurm job {job_id}: {state}, fill exit code {returncode}, {rows} rows in {job.out_dir}")
        return environment, compute, {"job_id": str(job_id), "state": state, "returncode": returncode,
                                      "drained": drained, "rows": rows, "problems": problems}

    def _forget_messages(self, context, compute: ComputeResource | None) -> None:
        """Before a resubmission in the same step: dagster-slurm reuses the step's remote directory, and
        its message reader would replay the last job's Pipes messages (their logs, their 'closed')."""
        if compute is None:
            return
        try:
            client = compute.get_pipes_client(context)
            run_id = context.run.run_id
            with SSHConnectionPool(self.slurm.ssh) as pool:
                run_dir = client._get_remote_run_dir(client._get_remote_base(run_id, pool), run_id,
                                                     context.op_execution_context)
                pool.run(f"rm -f {shlex.quote(run_dir + '/messages.jsonl')}")
        except Exception as e:  # noqa: BLE001 - dagster-slurm's internals moved: duplicate log lines at worst
            context.log.debug(f"could not clear the last job's Pipes messages: {e}")

    def gpus(self, pool: SSHConnectionPool) -> int:
        """GPUs per job: ``gpus_per_task``, else 1 when the partition's nodes have a GPU GRES, else 0."""
        if self.gpus_per_task is not None:
            return self.gpus_per_task
        if self._gpus is None:
            wanted = self.slurm.queue.partition
            gres = []
            for line in pool.run("sinfo -h -o '%P %G'").splitlines():
                name, _, g = line.strip().partition(" ")
                if (name.rstrip("*") == wanted) if wanted else name.endswith("*"):
                    gres.append(g)
            self._gpus = 1 if any("gpu" in g for g in gres) else 0
        return self._gpus

    # -- environments ----------------------------------------------------------------------------

    def environment(self, context, pool: SSHConnectionPool, job: FillJob) -> tuple[str, list[str]]:
        """The environment directory the job runs in, built first when missing (see the module docstring),
        and why a family's environment could not be built: its backends then run in the base environment,
        where the fill skips them, saying why."""
        if self.pre_deployed_env_path:
            return self.pre_deployed_env_path, []
        extras = families(job.backends)
        try:
            return self._ensure(context, pool, extras), []
        except RuntimeError as e:
            if not extras:
                raise
            said = [line.strip() for line in str(e).splitlines() if line.strip()]
            why = (f"the environment for {'+'.join(extras)} could not be built ({said[-1][:300] if said else e}); "
                   "its backends run in the base environment")
            context.log.warning(why)
            return self._ensure(context, pool, []), [why]

    def _ensure(self, context, pool: SSHConnectionPool, extras: list[str]) -> str:
        name, key = "+".join(extras) or "base", self.env_key(extras)
        root = self.env_root or f"{(self.slurm.remote_base or pool.run('echo $HOME').strip())}/popcorn-envs"
        path = f"{root}/{name}-{key}"
        command = f"bash -c {shlex.quote(self._build_script(root, path, extras))}"
        if self.container_image:
            command = shlex.join(self._srun(0)) + " " + command
        started = time.monotonic()
        said = pool.run(command, timeout=self.build_timeout_s).strip().splitlines()
        context.log.info(f"{said[-1] if said else path} ({time.monotonic() - started:.0f} s)")
        return path

    def env_key(self, extras: list[str]) -> str:
        """What an environment is made of, hashed: a change of any of it builds a new environment."""
        # the dependencies are declared in this checkout's pyproject.toml; its code is installed editable
        pyproject = hashlib.sha256((PROJECT / "pyproject.toml").read_bytes()).hexdigest()
        parts = {"layout": ENV_LAYOUT, "pyproject": pyproject, "extras": extras, "base_python": self.base_python,
                 "pip_args": self.pip_args, "image": self.container_image, "project": self.project_dir or str(PROJECT),
                 "pipes": _pipes_version()}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]

    def _build_script(self, root: str, path: str, extras: list[str]) -> str:
        project = self.project_dir or str(PROJECT)
        spec = f"{project}[{','.join(['bench', *extras])}]"
        pip = shlex.join(["install", "--disable-pip-version-check", "-q", *self.pip_args, "-e", spec,
                          f"dagster-pipes=={_pipes_version()}"])
        q = shlex.quote
        # the overlay: a venv without packages of its own whose .pth adds the base interpreter's site
        # directories (processing their .pth files, so the base's editable installs work too) after its own
        return f"""set -euo pipefail
mkdir -p {q(root)}
exec 9>{q(root + '/.lock')}
flock 9
if [ -f {q(path + '/.ready')} ]; then echo "reusing environment {path}"; exit 0; fi
rm -rf {q(path)}
{q(self.base_python)} -m venv --without-pip {q(path + '/env')}
site=$({q(path + '/env/bin/python')} -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
{q(self.base_python)} -c 'import site, sys; dirs = site.getsitepackages() + [site.getusersitepackages()]; \
print("import site; " + "; ".join("site.addsitedir(%r)" % d for d in dirs))' > "$site/_popcorn_base.pth"
{q(path + '/env/bin/python')} -m pip {pip}
cat > {q(path + '/activate.sh')} <<'EOF'
export VIRTUAL_ENV={q(path + '/env')}
export PATH="$VIRTUAL_ENV/bin:$PATH"
unset PYTHONHOME
EOF
echo {q(json.dumps({"extras": extras, "image": self.container_image, "base_python": self.base_python}))} \
> {q(path + '/.ready')}
echo "built environment {path}"
"""

    # -- containers ------------------------------------------------------------------------------

    def _srun(self, gpus: int) -> list[str]:
        cmd = ["srun", "--ntasks=1", f"--container-image={self.container_image}",
               f"--container-workdir={self.project_dir or PROJECT}"]
        if self.container_mounts:
            cmd.append(f"--container-mounts={','.join(self.container_mounts)}")
        if self.slurm.queue.partition:
            cmd.append(f"--partition={self.slurm.queue.partition}")
        if self.slurm.queue.account:
            cmd.append(f"--account={self.slurm.queue.account}")
        if gpus:
            cmd.append(f"--gres=gpu:{gpus}")
        return cmd

    def _container_prefix(self, gpus: int) -> list[str]:
        """Inside the job, the fill's srun step into the image (nothing without an image); the step
        runs in the job's allocation, so it takes no partition or account."""
        if not self.container_image:
            return []
        return [a for a in self._srun(gpus) if not a.startswith(("--partition", "--account"))]


def families(backends) -> list[str]:
    """The install extras the backends need (liger, fla, ...), sorted; torch-native ones need none."""
    from popcorn.core.backends import BACKENDS

    extras = set()
    for b in backends:
        family = BACKENDS.get(b.split(":")[0])
        if family is not None and family.extra:
            extras.add(family.extra)
    return sorted(extras)


def _pipes_version() -> str:
    """dagster-pipes as installed here: the payload's Pipes must speak the protocol of this Dagster."""
    from importlib.metadata import version

    return version("dagster-pipes")


def _job_id_in(error: Exception | None) -> str | None:
    m = re.search(r"\bJob (\d+)", str(error or ""))
    return m.group(1) if m else None


def _final_state(pool: SSHConnectionPool, job_id: str, error: Exception | None) -> tuple[str, int | None]:
    """(state, exit code) of a finished job: from sacct, else scontrol, else dagster-slurm's message."""
    out = pool.run(f"sacct -X -n -P -j {int(job_id)} -o State,ExitCode 2>/dev/null || true").strip()
    if out:
        state, _, code = out.splitlines()[0].partition("|")
        return state.split()[0], _exit_status(code)
    out = pool.run(f"scontrol show job {int(job_id)} 2>/dev/null || true")
    m = re.search(r"JobState=(\w+)", out)
    if m:
        code = re.search(r"ExitCode=(\S+)", out)
        return m.group(1), _exit_status(code.group(1) if code else "")
    if error is None:
        return "COMPLETED", 0
    m = re.search(r"[Ff]inal (?:parent |batch )?state: (\w+)", str(error))
    return (m.group(1) if m else "FAILED"), None


def _exit_status(code: str) -> int | None:
    status, _, sig = code.partition(":")
    try:
        return 128 + int(sig) if sig and int(sig) else int(status)
    except ValueError:
        return None


def _rows(out_dir: Path) -> int:
    """Rows in a shard directory (lines of its ``<op>.jsonl`` files)."""
    return sum(sum(1 for line in open(f, "rb") if line.strip()) for f in out_dir.glob("*.jsonl"))


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
