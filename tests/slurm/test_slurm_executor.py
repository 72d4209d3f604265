"""A measurement partition as a real Slurm job through dagster-slurm, on CPU: its job id, its rows in the
shard and then in the Delta store, and a walltime that expires mid-partition losing no finished row."""

import json
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
    job = FillJob(ops=("rms_norm",), backends=("torch", "liger"), strata=(), out_dir=str(shard), limit=2, trials=1,
                  device="cpu")
    result, log = materialize(make_executor(), job, "rms_norm.sample")

    assert result.returncode == 0 and result.state == "COMPLETED" and not result.timed_out
    assert sacct(cluster, result.job_id) == f"{result.job_id}|COMPLETED|0:0"  # Slurm's accounting knows the job
    assert any(f"Slurm job {result.job_id} on " in line for line in log)  # the payload's first line, over Pipes
    assert any("case-backend pairs measured" in line for line in log)  # the fill's output, streamed
    outcome = json.loads((shard / ".slurm" / f"{result.job_id}.json").read_text())
    assert outcome["returncode"] == 0 and outcome["signals"] == []
    # liger's environment cannot be built here (no package index): its backends ran in the base
    # environment, where the fill skipped liger, saying why; the result and the run log carry both
    assert any("the environment for liger could not be built" in s for s in result.skipped)
    assert any("backend 'liger' needs package 'liger-kernel'" in s for s in result.skipped)
    assert any("skipped on the cluster" in line and "liger-kernel" in line for line in log)
    assert Path(result.environment, ".ready").exists() and result.environment.endswith("/base-" +
                                                                                       result.environment[-12:])

    bad: list = []
    rows = store.read("rms_norm", root=shard, bad=bad)
    assert not bad and len(rows) == 2 and all(r.status == "pass" and r.impl == "torch" for r in rows)
    target = ReportStore(str(tmp_path / "store"))
    target.merge(rows)
    assert sorted(r.case_id for r in target.read("rms_norm")) == sorted(r.case_id for r in rows)


def test_a_walltime_drain_keeps_every_finished_row_and_a_resubmission_completes(cluster, make_executor, tmp_path):
    shard = tmp_path / "shard"
    planned = 24  # cases, each measured by torch and by toy:slow (about 80 calls of 60 ms)
    job = FillJob(ops=(TOY,), backends=("toy:slow",), strata=(), out_dir=str(shard), limit=planned, trials=1,
                  device="cpu")
    slow = make_executor(time_limit="00:01:00", max_resubmits=0, env={"TOY_SLOW_S": "0.06"})
    first, log = materialize(slow, job, "toy_scale.slow")

    # Slurm's minimum walltime expired mid-partition: SIGTERM, the fill drained, the job is TIMEOUT
    assert first.state == "TIMEOUT" and first.timed_out and first.returncode == 130
    assert sacct(cluster, first.job_id).startswith(f"{first.job_id}|TIMEOUT|")
    assert "stopped by SIGTERM" in first.log
    measured = int(first.log.split(" case-backend pairs measured")[0].split()[-1])
    bad: list = []
    kept = store.read("toy_scale", root=shard, bad=bad)
    assert not bad  # no half-written line
    assert 0 < len(kept) == measured < 2 * planned  # every pair the fill finished is in the shard, and only those
    assert all(r.status == "pass" for r in kept)  # the case in flight left no crash row
    assert any("TIMEOUT" in line for line in log)

    # the same FillJob again (a toy that no longer sleeps: the test's time, not the mechanism); it skips
    # every case the shard holds
    second, log = materialize(make_executor(env={"TOY_SLOW_S": "0"}), job, "toy_scale.slow")
    assert second.state == "COMPLETED" and second.returncode == 0
    assert any(f"reusing environment {second.environment}" in line for line in log)  # built once, reused
    done = store.read("toy_scale", root=shard)
    assert len(done) == 2 * planned and all(r.status == "pass" for r in done)  # all planned cases present
    before = {(r.impl, r.case_id, r.grad): r.ts for r in kept}
    assert {(r.impl, r.case_id, r.grad): r.ts for r in done if (r.impl, r.case_id, r.grad) in before} == before
    resumed = int(second.log.split(" case-backend pairs measured")[0].split()[-1])
    assert resumed == 2 * planned - len(kept)  # nothing measured twice
