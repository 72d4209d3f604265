"""The report store on a real Delta table, and the merge / publish / view commands."""

import json
import multiprocessing as mp
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from popcorn.bench import store
from popcorn.bench.delta import ReportStore
from popcorn.bench.publish import PublishRefused, publish
from popcorn.bench.record import SENTINEL_REASON
from popcorn.kernels import OPS

from .test_record import make


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    return ReportStore()


def current(**kw):
    """A passing, timed rms_norm compile row with today's fingerprints."""
    op = OPS["rms_norm"]
    base = dict(ref_hash=op.ref_hash, impl_hash=op["compile"].impl_hash, ref_fwd_ms=1.0, fwd_ms=0.5)
    return make(**{**base, **kw})


def test_merge_is_idempotent(report):
    rows = [make(case_id=f"c{i}") for i in range(10)]
    report.merge(rows)
    v = report.version
    metrics = report.merge(rows)
    assert metrics["num_target_rows_updated"] == 0 and metrics["num_target_rows_inserted"] == 0
    assert sorted(r.to_json() for r in report.read()) == sorted(r.to_json() for r in rows)
    assert report.version == v  # nothing changed, so nothing was committed


def test_conclusive_beats_inconclusive_and_newer_beats_older(report):
    report.merge([make(status="pass", ts="2026-01-01T00:00:00+00:00")])
    report.merge([make(status="timeout", ts="2026-09-01T00:00:00+00:00")])
    assert [r.status for r in report.read()] == ["pass"]
    report.merge([make(status="fail", reason="err", ts="2026-10-01T00:00:00+00:00")])
    assert [r.status for r in report.read()] == ["fail"]
    report.merge([make(status="pass", ts="2026-03-01T00:00:00+00:00")])  # older: ignored
    assert [r.status for r in report.read()] == ["fail"]


def test_null_backend_version_is_part_of_the_key(report):
    report.merge([make(backend_version=None), make(backend_version="0.7.0")])
    report.merge([make(backend_version=None, ts="2027-01-01T00:00:00+00:00", fwd_ms=3.0)])
    got = {r.backend_version: r.fwd_ms for r in report.read()}
    assert got == {None: 3.0, "0.7.0": 0.5}


def test_string_filters_work_after_merges(report):
    report.merge([make(case_id="a"), make(case_id="b", status="fail", reason="x")])
    report.merge([make(case_id="b", status="pass", ts="2027-01-01T00:00:00+00:00"), make(case_id="c", op="softmax")])
    table = report.table().to_pyarrow_table()
    assert any(pa.types.is_string_view(f.type) for f in table.schema) or report.version >= 1
    assert {r.case_id for r in report.read("rms_norm", status="pass")} == {"a", "b"}
    assert [r.case_id for r in report.read(op="softmax", impl="compile")] == ["c"]
    with pytest.raises(ValueError, match="unknown columns"):
        report.read(nope=1)


def test_scrub_removes_only_sentinel_rows(report):
    report.merge([make(case_id="a"), make(case_id="b", status="crash", reason=SENTINEL_REASON)])
    assert report.scrub_incomplete() == 1
    assert [r.case_id for r in report.read()] == ["a"]


def test_history_and_time_travel(report):
    report.merge([make(case_id="a")])
    report.merge([make(case_id="b")])
    assert len(report.read(version=0)) == 1 and len(report.read()) == 2
    assert len(report.history()) == 2


def _merger(uri, worker, n):
    os.environ["POPCORN_STORE"] = uri
    s = ReportStore()
    for i in range(n):
        s.merge([make(case_id=f"w{worker}-{i}")])


def test_two_processes_merging_at_once_lose_nothing(report):
    report.merge([make(case_id="seed")])
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_merger, args=(report.uri, w, 8)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert {r.case_id for r in report.read()} == {"seed"} | {f"w{w}-{i}" for w in range(2) for i in range(8)}


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "popcorn.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_cli_merge_reports_and_skips_a_corrupt_line(report, tmp_path):
    shard = tmp_path / "shard.jsonl"
    shard.write_text(make(case_id="a").to_json() + "\n{broken\n" + make(case_id="b").to_json() + "\n")
    out = cli("bench", "merge", str(shard), "--scrub-incomplete")
    assert out.returncode == 1  # something was skipped: say so in the exit code too
    assert f"skipped {shard}:2" in out.stderr
    assert {r.case_id for r in report.read()} == {"a", "b"}
    assert "merged 2 rows" in out.stdout and "scrubbed 0" in out.stdout


def test_cli_merge_defaults_to_the_user_cache(report):
    store.write([make(case_id="from-cache")])
    out = cli("bench", "merge")
    assert out.returncode == 0, out.stderr
    assert [r.case_id for r in report.read()] == ["from-cache"]


def test_publish_refuses_a_failing_release_and_force_writes_an_immutable_report(report, tmp_path):
    report.merge([current(case_id="a"), current(case_id="b", status="crash", reason="boom", fwd_ms=None)])
    out = tmp_path / "published"
    with pytest.raises(PublishRefused, match="release check fails"):
        publish(report, OPS, out)
    assert not out.exists() or not list(out.iterdir())
    path = publish(report, OPS, out, force=True)
    table = json.loads(path.read_text())
    assert table["store_version"] == report.version and table["rows"] == 2
    assert {r["case_id"] for r in table["ops"]["rms_norm"]["rows"]} == {"a", "b"}
    with pytest.raises(PublishRefused, match="immutable"):
        publish(report, OPS, out, force=True)


def test_published_report_loads_without_deltalake_or_dagster(report, tmp_path):
    report.merge([current(case_id="a"), make(case_id="stale")])  # the stale row is not published
    out = tmp_path / "published"
    publish(report, OPS, out, force=True)
    code = ("import sys; from popcorn.dispatch.table import load; t = load(sys.argv[1]); "
            "assert [r['case_id'] for r in t.rows('rms_norm')] == ['a'], t.rows('rms_norm'); "
            "bad = [m for m in ('deltalake', 'dagster', 'pyarrow') if m in sys.modules]; "
            "assert not bad, bad; print(t.store_version)")
    res = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(report.version)


def test_cli_view_as_of_and_publish(report, tmp_path):
    report.merge([current(case_id="a")])
    report.merge([current(case_id="b", ts="2027-01-01T00:00:00+00:00")])
    out = cli("bench", "view", "--as-of", "0")
    assert out.returncode == 0, out.stderr
    assert "rms_norm" in out.stdout and "1 rows" in out.stdout.replace("row ", "rows ")
    pub = cli("bench", "publish", "--out", str(tmp_path / "pub"))
    assert pub.returncode == 1 and "--force" in pub.stderr


def test_a_store_written_before_a_column_existed_takes_and_reads_new_rows(report):
    from deltalake import write_deltalake

    from popcorn.bench.record import to_arrow

    old = to_arrow([make(case_id="old")])
    old = old.drop_columns(["step_host_us", "canary_us"])  # as a popcorn without those columns wrote it
    write_deltalake(report.uri, old, partition_by=["op"])
    report.merge([make(case_id="new", step_host_us=42.0, canary_us=1.29)])
    got = {r.case_id: (r.step_host_us, r.canary_us) for r in report.read()}
    assert got == {"old": (None, None), "new": (42.0, 1.29)}
