"""A local sweep across every GPU of one host, simulated on CPU: three fake devices (CUDA_VISIBLE_DEVICES
lists them; torch sees none, so each fill runs on the CPU) and four partitions. The GPU pool follows the
visible devices, each fill is pinned to one, no two fills share one at a time and every partition runs
exactly once."""

import os
import re

import pytest

from popcorn.bench.delta import ReportStore

from .conftest import NEEDS_DAGSTER

pytest.importorskip("dagster", reason=NEEDS_DAGSTER)

from orchestration import cli  # noqa: E402

from .test_sweep_cli import home, popcorn, stop_supervisor  # noqa: E402, F401 - home: the fixture

DEVICES = ["0", "1", "2"]
OP = "rms_norm"
STRATA = ["coverage-float32-grad", "coverage-bfloat16-grad", "coverage-float16-grad", "coverage-float16-fwd"]
PINNED = re.compile(r"^fill on GPU (\S+): ")


def test_a_local_sweep_spreads_its_partitions_over_every_visible_device_once_each(home, sweep_env, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(DEVICES))
    launched = popcorn("sweep", "submit", "--local", "--ops", OP, "--strata", *STRATA, "--phases", "reference",
                       "--limit", "1", "--reps", "1", env={**os.environ})
    assert launched.returncode == 0, launched.stdout + launched.stderr
    assert f"reference {len(STRATA)}, merge 1" in launched.stdout
    assert cli.main(["watch"]) == 0, (home / "popcorn-sweep" / "daemon.log").read_text()[-3000:]

    from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

    inst = DagsterInstance.get()
    assert inst.event_log_storage.get_concurrency_info("gpu").slot_count == len(DEVICES)  # the pool follows them
    fills = []  # (partition, device, start, end) of every run that ran a fill
    for record in inst.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS])):
        pinned = [m.group(1) for e in inst.all_logs(record.dagster_run.run_id) if (m := PINNED.match(e.user_message))]
        if pinned:
            start = min(e.timestamp for e in inst.all_logs(record.dagster_run.run_id) if PINNED.match(e.user_message))
            fills.append((record.dagster_run.tags.get("dagster/partition"), pinned, start, record.end_time))
    assert sorted(f[0] for f in fills) == sorted(f"{OP}.{s}" for s in STRATA)  # every partition ran, once
    assert all(len(f[1]) == 1 and f[1][0] in DEVICES for f in fills)  # each fill pinned to one device
    for i, (key, (device,), start, end) in enumerate(fills):
        for other, (other_device,), other_start, other_end in fills[i + 1:]:
            if start < other_end and other_start < end:  # side by side: never on one device
                assert device != other_device, f"{key} and {other} shared GPU {device}"
    spans = sorted((s, e) for _, _, s, e in fills)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert 1 <= most <= len(DEVICES)  # never more fills at once than devices

    materialized = inst.get_materialized_partitions(AssetKey("reference"))
    assert materialized == {f"{OP}.{s}" for s in STRATA}
    rows = ReportStore(str(sweep_env / "store")).read(OP)
    assert {r.impl for r in rows} == {"torch"} and len({(r.case_id, r.grad) for r in rows}) == len(STRATA)  # each once
    assert stop_supervisor(home)
