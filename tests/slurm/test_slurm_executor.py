"""A measurement partition as a real Slurm job through dagster-slurm, on CPU: its job id, its rows in the
shard and then in the Delta store, and a walltime that expires mid-partition losing no finished row."""

import json
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
from orchestration.execution import FillJob
from orchestration.slurm import SlurmExecutor
from popcorn.bench import store
from popcorn.bench.delta import ReportStore

TOY = "tests.bench.fill_ops:toy_scale"  # the worker imports tests.bench.fill_ops: the jobs' PYTHONPATH has the repo


def materialize(executor, job: FillJob, partition: str):
    """Materialize one partition of an asset whose body is ``executor.fill``; (FillResult, run log lines)."""
    got = {}

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition([partition]))
    def measurements(context: dg.AssetExecutionContext, executor: SlurmExecutor) -> dg.MaterializeResult:
        got["result"] = result = executor.fill(context, job)
        return dg.MaterializeResult(metadata={"fill_state": result.state, "fill_rows": result.attempts[-1]["rows"]})

    instance = dg.DagsterInstance.ephemeral()
    run = dg.materialize([measurements], partition_key=partition, resources={"executor": executor},
                         instance=instance)
    assert run.success
    return got["result"], [e.user_message for e in instance.all_logs(run.run_id) if e.user_message]


def sacct(cluster, job_id: str) -> str:
    return cluster.run("sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode").strip()


def test_a_measurement_partition_runs_as_a_slurm_job_and_its_rows_reach_the_store(cluster, make_executor, tmp_path):
    shard = tmp_path / "shard"
    job = FillJob(ops=("rms_norm",), backends=("torch", "quack"), strata=(), out_dir=str(shard), limit=2, trials=1,
                  device="cpu")
    result, log = materialize(make_executor(), job, "rms_norm.sample")

    assert result.returncode == 0 and result.state == "COMPLETED" and not result.timed_out
    assert sacct(cluster, result.job_id) == f"{result.job_id}|COMPLETED|0:0"  # Slurm's accounting knows the job
    assert any(f"Slurm job {result.job_id} on " in line for line in log)  # the payload's first line, over Pipes
    assert any("case-backend pairs measured" in line for line in log)  # the fill's output, streamed
    outcome = json.loads((shard / ".slurm" / f"{result.job_id}.json").read_text())
    assert outcome["returncode"] == 0 and outcome["signals"] == []
    # quack's environment cannot be built here (no package index; the dev install never has quack): its
    # backends ran in the base environment, where the fill skipped quack, saying why; the result and the
    # run log carry both
    assert any("the environment for quack could not be built" in s for s in result.skipped)
    assert any("backend 'quack' needs package 'quack-kernels'" in s for s in result.skipped)
    assert any("skipped on the cluster" in line and "quack-kernels" in line for line in log)
    assert Path(result.environment, ".ready").exists() and result.environment.endswith("/base-" +
                                                                                       result.environment[-12:])

    bad: list = []
    rows = store.read("rms_norm", root=shard, bad=bad)
    assert not bad and len(rows) == 2 and all(r.status == "pass" and r.impl == "torch" for r in rows)
    target = ReportStore(str(tmp_path / "store"))
    target.merge(rows)
    assert sorted(r.case_id for r in target.read("rms_norm")) == sorted(r.case_id for r in rows)


def test_a_walltime_drain_keeps_every_finished_row_and_the_resubmission_completes(cluster, make_executor, tmp_path):
    shard = tmp_path / "shard"
    planned = 24  # cases, each measured by torch and by toy:slow (about 80 calls of 60 ms in the first job)
    job = FillJob(ops=(TOY,), backends=("toy:slow",), strata=(), out_dir=str(shard), limit=planned, trials=1,
                  device="cpu")
    # Slurm's minimum walltime; the toy sleeps in the first job only (the test's time, not the mechanism)
    executor = make_executor(time_limit="00:01:00", max_resubmits=2, env={"TOY_SLOW_S": "0.06", "TOY_SLOW_JOBS": "1"})
    result, log = materialize(executor, job, "toy_scale.slow")
    first, second = result.attempts[0], result.attempts[-1]

    # the walltime expired mid-partition: SIGTERM, the fill drained (exit 130), the job is TIMEOUT
    assert len(result.attempts) == 2 and first["state"] == "TIMEOUT" and first["returncode"] == 130
    assert first["drained"] and result.drained
    assert sacct(cluster, first["job_id"]).startswith(f"{first['job_id']}|TIMEOUT|")
    first_log = (shard / ".slurm" / f"{first['job_id']}.log").read_text()
    assert "stopped by SIGTERM" in first_log
    measured = int(first_log.split(" case-backend pairs measured")[0].split()[-1])
    assert 0 < first["rows"] == measured < 2 * planned  # every pair it finished was in the shard, and only those
    assert any("resubmitting the rest" in line for line in log)
    assert any(f"reusing environment {result.environment}" in line for line in log)  # built once, then reused

    # the same FillJob, resubmitted by the executor, skipped what the shard held and completed the partition
    assert second["state"] == "COMPLETED" and result.state == "COMPLETED" and result.returncode == 0
    assert not result.timed_out and result.job_id == second["job_id"] != first["job_id"]
    assert sacct(cluster, second["job_id"]) == f"{second['job_id']}|COMPLETED|0:0"
    second_log = (shard / ".slurm" / f"{second['job_id']}.log").read_text()
    assert int(second_log.split(" case-backend pairs measured")[0].split()[-1]) == 2 * planned - measured
    bad: list = []
    done = store.read("toy_scale", root=shard, bad=bad)
    assert not bad and not list(shard.glob("*.damaged-*"))  # never a half-written line
    assert len(done) == 2 * planned and all(r.status == "pass" for r in done)  # all planned cases, no crash row
    # the first job's rows are the ones kept: written before it ended, untouched since
    ended = datetime.fromtimestamp((shard / ".slurm" / f"{first['job_id']}.json").stat().st_mtime, timezone.utc)
    assert sum(datetime.fromisoformat(r.ts) <= ended for r in done) == measured

