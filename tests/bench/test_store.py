"""The user cache: merge on write, cross-process safety, clear errors."""

import multiprocessing as mp

import pytest

from popcorn.bench import store

from .test_record import make


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_write_then_read_upserts_by_key(cache):
    store.write([make(fwd_ms=1.0, ts="2026-01-01T00:00:00+00:00")])
    store.write([make(fwd_ms=2.0, ts="2026-02-01T00:00:00+00:00"), make(case_id="other")])
    rows = store.read("rms_norm")
    assert len(rows) == 2
    assert {r.case_id: r.fwd_ms for r in rows}["0123456789ab"] == 2.0
    assert store.path_for("rms_norm").is_relative_to(cache)


def test_inconclusive_rows_do_not_replace_conclusive_ones():
    store.write([make(status="pass", ts="2026-01-01T00:00:00+00:00")])
    store.write([make(status="timeout", ts="2026-09-01T00:00:00+00:00")])
    assert store.read("rms_norm")[0].status == "pass"


def _writer(root: str, worker: int, n: int) -> None:
    import os
    os.environ["POPCORN_CACHE_DIR"] = root
    for i in range(n):
        store.write([make(case_id=f"w{worker}-{i}")])


def test_two_processes_writing_the_same_cache_lose_nothing(cache):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(cache), w, 25)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ids = {r.case_id for r in store.read("rms_norm")}
    assert ids == {f"w{w}-{i}" for w in range(2) for i in range(25)}


def test_corrupt_line_names_file_and_line(cache):
    store.write([make()])
    path = store.path_for("rms_norm")
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"rms_norm\.jsonl:2"):
        store.read("rms_norm")
