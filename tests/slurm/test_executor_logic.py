"""The SlurmExecutor's logic that needs no cluster: environment keys, resubmission after a walltime,
the payload's streaming of the fill's output, and the sbatch-side parsing."""

import importlib.util
import io
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster_slurm import SlurmQueueConfig, SlurmResource, SSHConnectionResource

from orchestration import slurm
from orchestration.execution import FillJob
from orchestration.slurm import SlurmExecutor, families


def executor(**kw) -> SlurmExecutor:
    ssh = SSHConnectionResource(host="login.example", user="me")
    return SlurmExecutor(slurm=SlurmResource(ssh=ssh, queue=SlurmQueueConfig(partition="gpu")), **kw)


def test_families_name_the_extras_backends_need():
    assert families(("torch", "compile", "sdpa:flash")) == []
    assert families(("liger", "liger:fused", "fla:chunk")) == ["fla", "liger"]
    assert families(("no-such-backend",)) == []


def test_an_environment_is_reused_while_its_inputs_hold_and_rebuilt_when_one_changes():
    base = executor().env_key(["liger"])
    assert executor().env_key(["liger"]) == base  # stable across processes and calls
    changed = [executor().env_key(["fla"]), executor(container_image="nvcr.io#nvidia/pytorch:25.09-py3").env_key(["liger"]),
               executor(pip_args=["--index-url", "https://x"]).env_key(["liger"]),
               executor(base_python="/opt/py/bin/python3").env_key(["liger"])]
    assert base not in changed and len(set(changed)) == len(changed)


def test_the_build_script_builds_once_under_a_lock_and_overlays_the_base_interpreter(tmp_path):
    ex = executor(base_python=sys.executable, pip_args=["--no-index", "--no-build-isolation"])
    script = ex._build_script(str(tmp_path), str(tmp_path / "base-k"), [])
    assert "flock 9" in script and ".ready" in script and "site.addsitedir" in script
    assert "-e " in script and "[bench]" in script  # the checkout, editable, with the harness's extra


def test_the_container_image_prefixes_builds_and_fills_with_a_pyxis_step():
    ex = executor(container_image="nvcr.io#nvidia/pytorch:25.09-py3", container_mounts=["/scratch:/scratch"])
    prefix = ex._container_prefix(gpus=1)
    assert prefix[0] == "srun" and "--container-image=nvcr.io#nvidia/pytorch:25.09-py3" in prefix
    assert "--container-mounts=/scratch:/scratch" in prefix and "--gres=gpu:1" in prefix
    assert not any(a.startswith("--partition") for a in prefix)  # the step runs inside the job's allocation
    assert "--partition=gpu" in ex._srun(0)  # the environment build is its own allocation
    assert executor()._container_prefix(gpus=1) == []


def attempt(job_id, state, returncode, drained, rows):
    return {"job_id": job_id, "state": state, "returncode": returncode, "drained": drained, "rows": rows,
            "problems": []}


def test_a_partition_stopped_by_its_walltime_is_resubmitted_until_it_completes(tmp_path, monkeypatch):
    outcomes = iter([attempt("7", "TIMEOUT", 130, True, 10), attempt("8", "TIMEOUT", 130, True, 20),
                     attempt("9", "COMPLETED", 0, False, 30)])
    monkeypatch.setattr(SlurmExecutor, "_submit", lambda self, context, job, n=1: ("/envs/base-x", None, next(outcomes)))
    job = FillJob(("rms_norm",), ("torch",), (), str(tmp_path))
    result = executor(max_resubmits=3).fill(dg.build_asset_context(), job)
    assert [a["job_id"] for a in result.attempts] == ["7", "8", "9"]
    assert result.state == "COMPLETED" and result.job_id == "9" and result.returncode == 0
    assert result.drained and not result.timed_out


def test_resubmissions_stop_at_max_resubmits_and_the_result_says_timeout(tmp_path, monkeypatch):
    outcomes = iter([attempt(str(i), "TIMEOUT", 130, True, i) for i in range(5)])
    monkeypatch.setattr(SlurmExecutor, "_submit", lambda self, context, job, n=1: ("/envs/base-x", None, next(outcomes)))
    result = executor(max_resubmits=1).fill(dg.build_asset_context(), FillJob(("rms_norm",), (), (), str(tmp_path)))
    assert len(result.attempts) == 2 and result.timed_out and result.returncode == 130


def test_a_fill_that_ended_is_complete_though_its_job_ran_out_of_time_closing(tmp_path, monkeypatch):
    outcomes = iter([attempt("4", "TIMEOUT", 0, False, 8)])
    monkeypatch.setattr(SlurmExecutor, "_submit", lambda self, context, job, n=1: ("/envs/base-x", None, next(outcomes)))
    result = executor().fill(dg.build_asset_context(), FillJob(("rms_norm",), (), (), str(tmp_path)))
    assert len(result.attempts) == 1 and result.state == "TIMEOUT" and not result.timed_out


def test_a_failed_or_cancelled_job_is_not_resubmitted(tmp_path, monkeypatch):
    outcomes = iter([attempt("3", "CANCELLED", 130, False, 4)])
    monkeypatch.setattr(SlurmExecutor, "_submit", lambda self, context, job, n=1: ("/envs/base-x", None, next(outcomes)))
    result = executor().fill(dg.build_asset_context(), FillJob(("rms_norm",), (), (), str(tmp_path)))
    assert len(result.attempts) == 1 and result.state == "CANCELLED"


def test_skipped_backends_are_collected_from_the_fill_output(tmp_path, monkeypatch):
    (tmp_path / ".slurm").mkdir()
    (tmp_path / ".slurm" / "5.log").write_text(
        "rms_norm: backend 'liger' needs package 'liger-kernel', which is not installed: pip install 'popcorn[liger]'\n"
        "rms_norm: 1/2 pass=1 ETA 6s\nrms_norm: none of liger is installed; measuring the reference only\n")
    monkeypatch.setattr(SlurmExecutor, "_submit",
                        lambda self, context, job, n=1: ("/envs/base-x", None, attempt("5", "COMPLETED", 0, False, 2)))
    result = executor().fill(dg.build_asset_context(), FillJob(("rms_norm",), ("liger",), (), str(tmp_path)))
    assert len(result.skipped) == 2 and "liger-kernel" in result.skipped[0]
    assert "1/2 pass=1" in result.log


@pytest.mark.parametrize("code,status", [("0:0", 0), ("130:0", 130), ("0:15", 143), ("0:9", 137), ("", None)])
def test_slurm_exit_codes(code, status):
    assert slurm._exit_status(code) == status


def load_payload():
    spec = importlib.util.spec_from_file_location("slurm_fill", slurm.PAYLOAD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Lines:
    def __init__(self):
        self.lines = []

    def info(self, text):
        self.lines.append(text)


def test_the_payload_streams_lines_and_throttles_the_progress_line(monkeypatch):
    payload = load_payload()
    text = "note one\n" + "".join(f"\rop: {i}/5 ETA 1s   " for i in range(1, 6)) + "\nop backend pass\n3 pairs"
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdout.write({text!r})"], stdout=subprocess.PIPE)
    log, out = io.BytesIO(), Lines()
    payload.stream(proc, log, out)
    proc.wait()
    assert log.getvalue().decode() == text  # the whole output, carriage returns and all, goes to the log file
    assert out.lines == ["note one", "op: 1/5 ETA 1s", "op: 5/5 ETA 1s", "op backend pass", "3 pairs"]


def test_the_payload_lives_on_the_standard_library_and_dagster_pipes():
    tree = Path(slurm.PAYLOAD).read_text()
    imports = {line.split()[1].split(".")[0] for line in tree.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "codecs", "json", "os", "shlex", "signal", "socket", "subprocess", "sys", "time",
                       "pathlib", "dagster_pipes"}


def test_from_env_reads_dagster_slurm_and_popcorn_variables(monkeypatch):
    for k, v in {"SLURM_SSH_HOST": "login.example", "SLURM_SSH_USER": "me", "SLURM_PARTITION": "h200",
                 "SLURM_TIME": "04:00:00", "SLURM_ACCOUNT": "proj", "POPCORN_SLURM_GPUS_PER_TASK": "1",
                 "POPCORN_SLURM_CONTAINER_IMAGE": "nvcr.io#nvidia/pytorch:25.09-py3",
                 "POPCORN_SLURM_CONTAINER_MOUNTS": "/scratch:/scratch,/home:/home",
                 "POPCORN_SLURM_PIP_ARGS": "--index-url https://pypi.example/simple"}.items():
        monkeypatch.setenv(k, v)
    ex = SlurmExecutor.from_env(max_resubmits=5)
    assert ex.slurm.queue.partition == "h200" and ex.slurm.queue.time_limit == "04:00:00"
    assert ex.slurm.queue.account == "proj" and ex.gpus_per_task == 1 and ex.max_resubmits == 5
    assert ex.container_mounts == ["/scratch:/scratch", "/home:/home"]
    assert ex.pip_args == ["--index-url", "https://pypi.example/simple"]
