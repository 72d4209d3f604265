"""`popcorn sweep` on CPU: submit a tiny local sweep (three reference partitions and the merge) through the
instance, one sweep at a time, watch it to the end, then status; a second submit launches nothing. The
machine has three fake GPUs (CUDA_VISIBLE_DEVICES lists them; torch sees none, so each fill runs on the
CPU): the GPU pool follows them, each fill is pinned to one, no two fills share one at a time and every
partition runs exactly once, as on a host with several GPUs."""

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popcorn.bench.delta import ReportStore

from .conftest import NEEDS_DAGSTER, REFERENCE_ONLY_CASE

pytest.importorskip("dagster", reason=NEEDS_DAGSTER)

from orchestration import cli, supervisor  # noqa: E402
from orchestration.watch import Phase, phase_of  # noqa: E402

OP, STRATUM = REFERENCE_ONLY_CASE.split(".")
STRATA = [STRATUM, "coverage-float32-grad", "coverage-bfloat16-grad"]  # each has a case on CPU
TINY = ["--local", "--ops", OP, "--strata", *STRATA, "--phases", "reference", "--limit", "1", "--reps", "1"]
DEVICES = ["0", "1", "2"]
PINNED = re.compile(r"^fill on GPU (\S+): ")


def popcorn(*args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "popcorn.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture
def home(sweep_env, monkeypatch):
    home = sweep_env / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    yield home
    stop_supervisor(home)


def stop_supervisor(home: Path, wait_s: float = 120) -> bool:
    """Wait for the sweep's supervisor to exit by itself (True), else stop it and its daemon (False)."""
    deadline = time.monotonic() + wait_s
    while supervisor.supervisor_alive(home) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not supervisor.supervisor_alive(home):
        return True
    state = json.loads((home / "popcorn-sweep" / "supervisor.json").read_text())
    for pid in (state.get("daemon_pid"), state.get("pid")):
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return False


def interrupted_watch(env, seconds: float = 180) -> subprocess.CompletedProcess:
    """`popcorn sweep watch` in a session of its own, sent SIGINT (a terminal's Ctrl-C) once it shows progress."""
    proc = subprocess.Popen([sys.executable, "-m", "popcorn.cli", "sweep", "watch"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    seen, deadline = [], time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                seen.append(line)
                if line.startswith("  reference") or not line:
                    break
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(seen) + out, err)


def test_a_partition_is_done_only_when_materialized_with_options_as_wide_on_the_device_asked_for():
    from orchestration.sweep import covers

    wanted = {"limit": None, "curves_only": False, "trials": 10, "device": "NVIDIA H200"}
    assert covers({"limit": None, "curves_only": False, "trials": 10, "device": "NVIDIA H200"}, wanted)
    assert not covers(None, wanted)
    assert not covers({"limit": 1, "curves_only": False, "trials": 10, "device": "NVIDIA H200"}, wanted)
    assert not covers({"limit": None, "curves_only": True, "trials": 10, "device": "NVIDIA H200"}, wanted)
    assert not covers({"limit": None, "curves_only": False, "trials": 1, "device": "NVIDIA H200"}, wanted)
    assert not covers({"limit": None, "curves_only": False, "trials": 10, "device": "cpu:ci"}, wanted)
    assert covers({"limit": None, "curves_only": False, "trials": 10, "device": "cpu:ci"}, {**wanted, "device": None})
    assert covers({"limit": None, "curves_only": False, "trials": 10}, {**wanted, "limit": 2, "curves_only": True,
                                                                         "device": None})


def test_a_measurement_brings_its_reference_partition_when_that_is_not_done(tmp_path):
    from dagster import DagsterInstance

    from orchestration.sweep import Options, targets

    parts, skipped = targets(DagsterInstance.ephemeral(tempdir=str(tmp_path)),
                             Options(phases=["compile", "sdpa"], ops=["rms_norm"], strata=["production-bfloat16-grad"]))
    assert [(p.asset_key.path[-1], p.partition_key) for p in parts] == [
        ("reference", "rms_norm.production-bfloat16-grad"), ("measurements", "compile|rms_norm.production-bfloat16-grad"),
        ("report_store", None)]  # sdpa has no rms_norm implementation: no partition
    assert skipped == {}


def test_submit_arguments_are_checked_before_anything_is_launched(home, capsys):
    with pytest.raises(SystemExit):
        cli.main(["submit", "--nodes", "11"])
    assert "--nodes takes 1 to 10" in capsys.readouterr().err
    assert cli.main(["submit", "--local", "--container-image", "nvcr.io#nvidia/pytorch:25.09-py3"]) == 2
    assert "not supported with --local" in capsys.readouterr().err
    assert cli.main(["submit", "--local", "--phases", "bogus"]) == 2
    assert "unknown phase(s) bogus; phases: reference, compile" in capsys.readouterr().err
    assert cli.main(["submit", "--local", "--ops", "nope"]) == 2
    assert "unknown op(s) nope" in capsys.readouterr().err
    try:
        import orchestration.slurm  # noqa: F401
    except ModuleNotFoundError:
        assert cli.main(["submit", "--nodes", "2"]) == 2  # a Slurm sweep needs the Slurm executor
        assert "orchestration/slurm.py" in capsys.readouterr().err
    assert not (home / "popcorn-sweep" / "supervisor.log").exists()  # nothing was started


def test_a_local_sweep_runs_to_the_end_one_at_a_time_over_every_gpu_and_a_rerun_launches_nothing(
        home, sweep_env, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(DEVICES))
    launched = popcorn("sweep", "submit", *TINY, env={**os.environ})
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert "launched sweep" in launched.stdout and f"reference {len(STRATA)}, merge 1" in launched.stdout
    assert "started the sweep's supervisor" in launched.stdout

    assert cli.main(["submit", *TINY]) == 1  # one sweep at a time
    assert "is running (one at a time)" in capsys.readouterr().err
    stopped = interrupted_watch(env={**os.environ})  # Ctrl-C on a watcher stops the watcher alone
    assert stopped.returncode == 0 and "the sweep goes on" in stopped.stdout, stopped.stdout + stopped.stderr

    assert cli.main(["watch"]) == 0, (home / "popcorn-sweep" / "daemon.log").read_text()[-3000:]
    watched = capsys.readouterr().out
    assert "reference    [" in watched and "] 1/1" in watched and "COMPLETED_SUCCESS" in watched
    rows = ReportStore(str(sweep_env / "store")).read(OP)
    assert [(r.impl, r.status) for r in rows] == [("torch", "pass")] * len(STRATA)  # measured, merged
    assert_spread_over_the_devices()

    assert cli.main(["status"]) == 0  # what `popcorn sweep status` runs
    status = capsys.readouterr().out
    assert "COMPLETED_SUCCESS" in status and "merge        [" in status and "store: " in status
    assert "release check at the last merge: records:" in status  # compile was never measured: FAILED

    assert cli.main(["submit", *TINY]) == 0
    assert "nothing to do" in capsys.readouterr().out
    from dagster import AssetKey, DagsterInstance

    assert DagsterInstance.get().get_latest_materialization_event(AssetKey("published_report")) is None  # never
    assert cli.main(["resume"]) == 0
    assert "nothing to resume" in capsys.readouterr().out
    assert stop_supervisor(home), "the supervisor did not stop once no sweep was active"


def assert_spread_over_the_devices():
    """The GPU pool has a slot per device; each partition's one run was pinned to one device; runs side by
    side never shared one, and no more ran at once than there are devices."""
    from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

    inst = DagsterInstance.get()
    assert inst.event_log_storage.get_concurrency_info("gpu").slot_count == len(DEVICES)
    fills = []  # (partition, devices it was pinned to, start, end) of every run that ran a fill
    for record in inst.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS])):
        logs = [(e.timestamp, m.group(1)) for e in inst.all_logs(record.dagster_run.run_id)
                if (m := PINNED.match(e.user_message))]
        if logs:
            fills.append((record.dagster_run.tags.get("dagster/partition"), [d for _, d in logs], logs[0][0],
                          record.end_time))
    assert sorted(f[0] for f in fills) == sorted(f"{OP}.{s}" for s in STRATA)  # every partition ran, once
    assert all(len(f[1]) == 1 and f[1][0] in DEVICES for f in fills)  # each pinned to one device
    for i, (key, (device,), start, end) in enumerate(fills):
        for other, (other_device,), other_start, other_end in fills[i + 1:]:
            if start < other_end and other_start < end:
                assert device != other_device, f"{key} and {other} shared GPU {device} at once"
    starts = [s for _, _, s, _ in fills]
    assert max(sum(1 for _, _, s, e in fills if s <= t < e) for t in starts) <= len(DEVICES)
    assert inst.get_materialized_partitions(AssetKey("reference")) == {f"{OP}.{s}" for s in STRATA}


def test_progress_is_counted_per_phase():
    from dagster import AssetKey
    from dagster._core.definitions.events import AssetKeyPartitionKey

    assert phase_of(AssetKeyPartitionKey(AssetKey("measurements"), "liger|rms_norm.production-bfloat16-grad")) == "liger"
    assert phase_of(AssetKeyPartitionKey(AssetKey("reference"), "rms_norm.production-bfloat16-grad")) == "reference"
    assert phase_of(AssetKeyPartitionKey(AssetKey("report_store"), None)) == "merge"
    phase = Phase("liger", 10)
    phase.counts.update(done=5, failed=1, running=2)
    assert phase.bar() == "  liger        [###############xxx------------] 5/10  (2 running, 1 failed)"


def test_fills_per_gpu_sizes_the_local_pool_and_is_checked(monkeypatch):
    from orchestration import execution
    from orchestration.sweep import EXECUTOR

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("POPCORN_SWEEP_FILLS_PER_GPU", raising=False)
    assert cli._gpus({EXECUTOR: "local"}) == 2
    monkeypatch.setenv("POPCORN_SWEEP_FILLS_PER_GPU", "3")  # device lanes keep timing alone: fills may share a GPU
    assert cli._gpus({EXECUTOR: "local"}) == 6
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cli._gpus({EXECUTOR: "local"}) == 1  # the CPU is one device, whatever the setting
    for bad in ("0", "two"):
        monkeypatch.setenv("POPCORN_SWEEP_FILLS_PER_GPU", bad)
        with pytest.raises(ValueError, match="POPCORN_SWEEP_FILLS_PER_GPU"):
            execution.fills_per_gpu()


def test_the_sweeps_instance_leaves_concurrency_to_the_gpu_pool(tmp_path, monkeypatch):
    from orchestration import sweep

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    inst = sweep.instance()
    coordinator = inst.run_coordinator
    assert type(coordinator).__name__ == "QueuedRunCoordinator"
    assert coordinator.dequeue_interval_seconds == 1  # a freed slot is filled within a second
    assert inst.get_concurrency_config().run_queue_config.max_concurrent_runs == -1  # 48 Slurm GPUs, not 10


def test_resume_takes_over_a_sweep_whose_supervisor_was_killed(home, sweep_env, capsys, monkeypatch):
    """The state a killed supervisor (or a restarted machine) leaves: an active backfill nothing works, a run
    it had started holding a GPU slot. `resume` ends both and runs the sweep to the end."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test

    from orchestration import sweep

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(DEVICES))
    options = sweep.Options(local=True, phases=["reference"], ops=[OP], strata=STRATA, limit=1, reps=1,
                            device=sweep.local_device())
    tags = options.tags()
    inst = sweep.instance()
    cli._plan(inst, tags)
    sweep.set_pools(inst, len(DEVICES))
    parts, _ = sweep.targets(inst, options)
    stale = sweep.launch(inst, parts, tags, "popcorn sweep")
    orphan = create_run_for_test(inst, status=DagsterRunStatus.STARTED, tags={"dagster/backfill": stale.backfill_id})
    inst.event_log_storage.claim_concurrency_slot("gpu", orphan.run_id, "reference")
    assert not supervisor.supervisor_alive(home)

    assert cli.main(["resume", "--watch"]) == 0, (home / "popcorn-sweep" / "daemon.log").read_text()[-3000:]
    out = capsys.readouterr().out
    assert "supervisor and Dagster daemon were gone" in out and "ended the 1 run(s)" in out
    assert "COMPLETED_SUCCESS" in out
    assert inst.get_run_by_id(orphan.run_id).status == DagsterRunStatus.FAILURE
    assert orphan.run_id not in inst.event_log_storage.get_concurrency_info("gpu").active_run_ids
    assert inst.get_backfill(stale.backfill_id).status.value == "CANCELED"
    rows = ReportStore(str(sweep_env / "store")).read(OP)
    assert sorted(r.status for r in rows) == ["pass"] * len(STRATA)
