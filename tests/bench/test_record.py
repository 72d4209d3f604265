"""Records: one schema across JSONL and Arrow; the merge rule; staleness."""

import json

import pytest

from popcorn.bench.record import TIMING_FIELDS, Record, arrow_schema, from_arrow, prefer, to_arrow


def make(**kw):
    base = dict(op="rms_norm", impl="compile", case_id="0123456789ab", case="normalized_shape=8,float32",
                config=json.dumps({"dims": {"normalized_shape": 8}}), device="NVIDIA H200", torch="2.11.0",
                backend_version=None, ref_hash="aaaaaaaaaaaa", impl_hash="bbbbbbbbbbbb", status="pass", grad=True,
                reps=10, fwd=json.dumps({"out0": {"err": 1e-3, "budget": 1e-3, "scale": 2.0}}), fwd_ms=0.5,
                ts="2026-12-02T10:00:00+00:00")
    base.update(kw)
    return Record(**base)


def test_jsonl_and_arrow_round_trip_unchanged():
    rows = [make(), make(impl="torch", status="fail", reason="out0: err", fwd_ms=None, bench_error="x"),
            make(case_id="ffffffffffff", grad=False, step_ms=1.25, host_us=12.5, backend_version="0.7.0")]
    assert [Record.from_json(r.to_json()) for r in rows] == rows
    table = to_arrow(rows)
    assert table.schema == arrow_schema()
    assert from_arrow(table) == rows


def test_all_null_columns_keep_their_types():
    table = to_arrow([make(fwd_ms=None)])
    assert str(table.schema.field("fwd_ms").type) == "double"
    assert str(table.schema.field("reason").type) == "string"


def test_key_and_result():
    r = make()
    assert r.key == ("rms_norm", "compile", "NVIDIA H200", "2.11.0", None, "0123456789ab", True)
    assert r.result["fwd"]["out0"]["scale"] == 2.0
    assert set(TIMING_FIELDS) <= set(r.result)


def test_merge_rule():
    old_pass = make(ts="2026-01-01T00:00:00+00:00")
    new_timeout = make(status="timeout", ts="2026-06-01T00:00:00+00:00")
    new_fail = make(status="fail", ts="2026-06-01T00:00:00+00:00")
    assert not prefer(new_timeout, old_pass)  # conclusive beats inconclusive regardless of time
    assert prefer(new_fail, old_pass)  # among conclusive rows the newer wins
    assert prefer(old_pass, new_timeout)


def test_staleness():
    r = make()
    assert r.current("aaaaaaaaaaaa", "bbbbbbbbbbbb")
    assert not r.current("aaaaaaaaaaaa", "cccccccccccc")


def test_unknown_columns_are_refused_clearly():
    row = make().to_dict() | {"surprise": 1}
    with pytest.raises(ValueError, match="unknown columns"):
        Record.from_dict(row)
