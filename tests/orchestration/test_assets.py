"""The sweep's assets materialized in process on CPU, with the real executor, fill, shards and store:
a reference and a measurement partition, the merge and the release check; then the same partitions
again, which measure nothing."""

import json
import warnings

import pytest

from popcorn.bench import store
from popcorn.bench.delta import ReportStore

from .conftest import BACKEND, CASE, NEEDS_DAGSTER, REFERENCE_ONLY_CASE

dg = pytest.importorskip("dagster", reason=NEEDS_DAGSTER)

from orchestration.assets.case_plan import case_plan  # noqa: E402
from orchestration.assets.measurements import measurements  # noqa: E402
from orchestration.assets.reference import reference  # noqa: E402
from orchestration.assets.report_store import release_check, report_store  # noqa: E402
from orchestration.execution import FillJob, FillResult, LocalExecutor  # noqa: E402
from orchestration.partitions import MEASUREMENTS, applies, case_key, case_keys, measurement_key, split_case  # noqa: E402
from orchestration.resources import ReportStoreResource, SweepSettings  # noqa: E402

ALL = [case_plan, reference, measurements, report_store, release_check]


@pytest.fixture
def resources(sweep_env):
    return {"sweep": SweepSettings(work_dir=str(sweep_env / "work"), limit=1, trials=1),
            "executor": LocalExecutor(lease_dir=str(sweep_env / "leases")),
            "store": ReportStoreResource(uri=str(sweep_env / "store"))}


def materialize(instance, resources, selection, partition_key=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        warnings.simplefilter("ignore", dg.PreviewWarning)
        result = dg.materialize(ALL, instance=instance, resources=resources, selection=selection,
                                partition_key=partition_key, raise_on_error=False)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


def meta(result, asset):
    event = next(e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(asset))
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_partition_keys_come_from_the_fill_plan_and_avoid_what_dagster_forbids():
    keys = case_keys()
    assert "rms_norm.production-bfloat16-grad" in keys and CASE in keys
    assert all(not set(k) & set("|,[]") and "..." not in k for k in keys)
    assert split_case("rms_norm.production-bfloat16-grad") == ("rms_norm", "production-bfloat16-grad")
    with pytest.raises(ValueError, match="Dagster forbids"):
        case_key("rms_norm", "a|b")
    backends = MEASUREMENTS.get_partitions_def_for_dimension("backend").get_partition_keys()
    assert "torch" not in backends and {"compile", "sdpa"} <= set(backends)
    assert applies("sdpa", CASE) and not applies("sdpa", "rms_norm.production-bfloat16-grad")
    assert str(measurement_key("sdpa", CASE)) == f"sdpa|{CASE}"  # dimensions sorted by name


def test_the_code_location_loads_with_the_local_executor_by_default(monkeypatch):
    from orchestration.definitions import defs

    dg.Definitions.validate_loadable(defs)
    assert isinstance(defs.resources["executor"], LocalExecutor)
    monkeypatch.setenv("POPCORN_SWEEP_EXECUTOR", "slurm")
    from orchestration.execution import executor_from_env

    monkeypatch.delenv("SLURM_SSH_HOST", raising=False)
    with pytest.raises(RuntimeError, match="SLURM_SSH_HOST.*--local"):  # no cluster configured: named, with the way out
        executor_from_env()


def test_a_fill_job_is_the_bench_fill_command_line():
    job = FillJob(ops=("rms_norm",), backends=("liger",), strata=("production-bfloat16-grad",), out_dir="/x",
                  limit=2, curves_only=True, trials=3)
    argv = job.argv()
    assert argv[1:] == ["-m", "popcorn.cli", "bench", "fill", "rms_norm", "--backend", "liger", "--stratum",
                        "production-bfloat16-grad", "--out", "/x", "--trials", "3", "--timeout", "300", "--limit",
                        "2", "--curves-only"]


def test_sweep_partitions_materialize_merge_and_a_second_time_measure_nothing(sweep_env, resources):
    instance = dg.DagsterInstance.ephemeral(tempdir=str(sweep_env / "dagster"))
    plan = materialize(instance, resources, [case_plan])
    assert plan.output_for_node("case_plan")[CASE] == 1  # --limit 1: one case per partition

    ref = materialize(instance, resources, [reference], CASE)
    ref_meta = meta(ref, "reference")
    assert ref_meta["rows"] == 1 and ref_meta["pass"] == 1 and ref_meta["measured"] == 1
    assert ref_meta["device"].startswith("cpu:") and ref_meta["torch"]
    [check] = ref.get_asset_check_evaluations()
    assert check.check_name == "no_failed_rows" and check.passed

    key = measurement_key(BACKEND, CASE)
    meas = materialize(instance, resources, [measurements], key)
    m = meta(meas, "measurements")
    assert m["rows"] == 3 and m["measured"] == 3  # sdpa's flash, efficient and math on the case (cudnn: gated)
    assert m["gated"] == 1 and m["pass"] >= 2 and m["median_speedup"] > 0
    shard = sweep_env / "work" / "measurements" / BACKEND / CASE
    summary = json.loads((shard / "fill-summary.json").read_text())
    assert {"op": "attn", "impl": "torch", "cached": 1} in summary["counts"]  # the reference partition's row
    rows = store.read("attn", root=shard)
    [ref_row] = [r for r in rows if r.impl == "torch"]
    assert ref_row.fwd_ms and all(r.ref_fwd_ms == ref_row.fwd_ms for r in rows if r.status == "pass"
                                  and r.impl != "torch")  # its timings, reused
    assert meas.get_asset_check_evaluations()[0].passed

    merged = materialize(instance, resources, [report_store, release_check])
    assert meta(merged, "report_store")["rows_merged"] == 4
    assert len(ReportStore(str(sweep_env / "store")).read("attn")) == 4
    [release] = merged.get_asset_check_evaluations()
    assert release.check_name == "release_check" and not release.passed  # compile was never measured
    assert release.metadata["missing"].value >= 1

    # The same partitions again: everything is cached in their shards and the store, nothing is measured.
    stamp = (shard / "attn.jsonl").stat().st_mtime_ns
    again = materialize(instance, resources, [reference], CASE)
    assert meta(again, "reference")["measured"] == 0 and meta(again, "reference")["cached"] == 1
    again = materialize(instance, resources, [measurements], key)
    assert meta(again, "measurements")["measured"] == 0 and meta(again, "measurements")["cached"] == 3
    assert meta(materialize(instance, resources, [report_store]), "report_store")["rows_merged"] == 0
    assert [r.ts for r in store.read("attn", root=shard)] == [r.ts for r in rows]
    assert (shard / "attn.jsonl").stat().st_mtime_ns >= stamp


class KilledAfterItsRows(LocalExecutor):
    """The real fill, reported as a job its scheduler killed once its rows were written (a walltime)."""

    def fill(self, context, job):
        done = super().fill(context, job)
        return FillResult(137, done.out_dir, "4242", done.log + "\n*** JOB 4242 CANCELLED DUE TO TIME LIMIT ***")


def test_a_failed_job_keeps_its_rows_fails_the_partition_and_a_rerun_resumes(sweep_env, resources):
    instance = dg.DagsterInstance.ephemeral(tempdir=str(sweep_env / "dagster"))
    killed = {**resources, "executor": KilledAfterItsRows(lease_dir=str(sweep_env / "leases"))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        failed = dg.materialize(ALL, instance=instance, resources=killed, selection=[reference],
                                partition_key=REFERENCE_ONLY_CASE, raise_on_error=False)
    assert not failed.success
    [failure] = [e for e in failed.all_events if e.is_step_failure]
    reason = failure.step_failure_data.user_failure_data.description
    assert "exited with 137" in reason and "the 1 rows it holds stay in" in reason and "TIME LIMIT" in reason
    merged = materialize(instance, resources, [report_store])  # nothing measured is lost
    assert meta(merged, "report_store")["rows_merged"] == 1
    again = meta(materialize(instance, resources, [reference], REFERENCE_ONLY_CASE), "reference")
    assert again["measured"] == 0 and again["cached"] == 1 and again["rows"] == 1

    # a backend family the op has no implementation of: an empty partition, no fill
    empty = materialize(instance, resources, [measurements], measurement_key("sdpa", REFERENCE_ONLY_CASE))
    assert meta(empty, "measurements")["rows"] == 0 and "no sdpa implementation" in meta(empty, "measurements")["note"]
