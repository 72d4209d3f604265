"""The record schema: torch-free, the one source of the columns, key, statuses and currency rule."""

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

from popcorn import schema
from popcorn.bench.record import Record

from .bench.test_record import make

SCHEMA_FILE = Path(schema.__file__)


def test_loads_with_the_standard_library_alone():
    # By file path: `import popcorn.schema` would run popcorn/__init__ (which imports torch) first.
    code = ("import importlib.util, sys; before = set(sys.modules); "
            f"spec = importlib.util.spec_from_file_location('schema', {str(SCHEMA_FILE)!r}); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "new = {n.split('.')[0] for n in set(sys.modules) - before}; "
            "print(sorted(n for n in new if n not in sys.stdlib_module_names)); print(m.REFERENCE)")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "torch"]  # nothing outside the standard library, torch least of all


def test_record_mirrors_the_fields():
    assert [(f.name, f.type) for f in fields(Record)] == [(f.name, f.type) for f in schema.FIELDS]
    assert make().key == tuple(getattr(make(), k) for k in schema.KEY)
    assert make().schema == schema.VERSION


def test_statuses():
    assert schema.STATUSES == ("pass", "fail", "crash", "oom", "timeout", "skip", "error")
    assert schema.JUDGED <= schema.CONCLUSIVE <= schema.REUSABLE <= set(schema.STATUSES)
    assert schema.FAILED == schema.JUDGED - {schema.PASS}
    assert set(schema.STATUSES) - schema.REUSABLE == {schema.ERROR}  # error rows are always measured again


def test_reference_fields_are_typed_timings():
    assert schema.REFERENCE_FIELDS == ("ref_fwd_ms", "ref_bwd_ms", "ref_step_ms", "ref_fwd_mem_mb", "ref_step_mem_mb")
    assert all(schema.TYPES[k] == "float | None" for k in schema.REFERENCE_FIELDS + schema.REFERENCE_TIMED)


class _Impl:
    impl_hash = "bbbbbbbbbbbb"


class _Op:
    ref_hash = "aaaaaaaaaaaa"
    implementations = {"compile": _Impl()}


def test_currency_rule_on_records_and_dicts():
    current, stale = make(), make(impl_hash="cccccccccccc")
    for row in (current, current.to_dict()):
        assert schema.is_current(row, "aaaaaaaaaaaa", "bbbbbbbbbbbb")
        assert schema.is_current_for(row, _Op)
    for row in (stale, stale.to_dict()):
        assert not schema.is_current(row, "aaaaaaaaaaaa", "bbbbbbbbbbbb")
        assert not schema.is_current_for(row, _Op)
    assert not schema.is_current(current, "aaaaaaaaaaaa", None)  # an implementation no longer registered
    assert not schema.is_current_for(make(impl="gone"), _Op)
    assert schema.why_stale([stale], "aaaaaaaaaaaa", "bbbbbbbbbbbb") == "implementation changed"
    assert schema.why_stale([make(ref_hash="d")], "aaaaaaaaaaaa", "x") == "reference and implementation changed"


def test_rank_is_the_merge_rule():
    old_pass = make(ts="2026-01-01T00:00:00+00:00")
    assert schema.rank(make(status="timeout", ts="2027-01-01T00:00:00+00:00")) < schema.rank(old_pass)
    assert schema.rank(make(status="fail", ts="2027-01-01T00:00:00+00:00")) > schema.rank(old_pass.to_dict())
