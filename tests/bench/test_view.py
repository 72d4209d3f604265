"""bench view: the terminal support matrix."""

import io

from popcorn.bench.view import ALL, EMPTY, EXPLORER, NONE, STALE, UNREGISTERED, Cell, columns, matrix, run_view, \
    support_matrix
from popcorn.kernels import OPS

from .test_record import make

OP = OPS["rms_norm"]


def row(impl="compile", **kw):
    kw.setdefault("ref_hash", OP.ref_hash)
    kw.setdefault("impl_hash", OP.implementations[impl].impl_hash)
    return make(impl=impl, **kw)


def cells(records, op="rms_norm"):
    lines = support_matrix(records, OPS).splitlines()
    head = lines[0].split()
    line = next(l for l in lines[1:] if l.split()[0] == op)
    # cells are padded to the header's column starts
    starts = [lines[0].index(name) for name in head]
    return {name: line[a:b].strip() for name, a, b in zip(head, starts, starts[1:] + [None])}


def test_columns_reference_first_then_sorted():
    cols = columns(OPS)
    assert cols[0] == "torch"
    assert cols[1:] == sorted(cols[1:]) and "compile" in cols and "sdpa:flash" in cols


def test_all_pass_with_median_speedup():
    records = [row(ref_fwd_ms=2.0, fwd_ms=1.0, case_id="a"), row(ref_fwd_ms=3.0, fwd_ms=1.0, case_id="b"),
               row(ref_fwd_ms=1.0, fwd_ms=2.0, case_id="c"), row(impl="torch", fwd_ms=2.0)]
    c = cells(records)
    assert c["compile"] == "✔ 2.0x"
    assert c["torch"] == "✔"  # the reference shows the mark only


def test_some_pass_none_pass_stale_and_empty():
    some = [row(ref_fwd_ms=1.0, fwd_ms=0.25), row(case_id="s", status="skip", fwd_ms=None)]
    assert cells(some)["compile"] == "✔* 4.0x"
    assert cells([row(ref_fwd_ms=1.0, fwd_ms=0.5), row(case_id="t", status="timeout", fwd_ms=None)])["compile"] \
        == "✔* 2.0x"
    assert cells([row(status="fail", fwd_ms=None), row(case_id="o", status="oom", fwd_ms=None)])["compile"] == "✘"
    assert cells([row(impl_hash="cccccccccccc")])["compile"] == "?"
    assert cells([row()])["torch"] == "·"
    assert cells([row()], op="softmax")["compile"] == "·"


def test_stale_rows_do_not_count():
    records = [row(ref_fwd_ms=1.0, fwd_ms=0.5), row(case_id="f", status="fail", impl_hash="cccccccccccc")]
    assert cells(records)["compile"] == "✔ 2.0x"


def test_speedup_needs_both_times():
    assert cells([row(ref_fwd_ms=None, fwd_ms=0.5)])["compile"] == "✔"


def test_unregistered_impl_cells_are_blank():
    assert cells([row()])["sdpa:flash"] == ""
    assert cells([row()], op="attn")["sdpa:flash"] == "·"


def test_run_view_footer():
    out = io.StringIO()
    records = [row(ref_fwd_ms=1.0, fwd_ms=0.5), row(impl_hash="cccccccccccc", case_id="x"), make(op="gone")]
    assert run_view(records, OPS, out=out) == 0
    text = out.getvalue()
    assert "3 rows (1 current, 1 of unregistered ops or implementations, not shown)" in text
    assert f"Explorer: {EXPLORER}" in text and EXPLORER == "streamlit run dashboards/app.py"
    empty = io.StringIO()
    assert run_view([], OPS, out=empty) == 1 and "no records" in empty.getvalue()


def test_matrix_is_data_without_text():
    records = [row(ref_fwd_ms=1.0, fwd_ms=0.5), row(case_id="f", status="fail", fwd_ms=None, impl_hash="cccccccccccc"),
               row(impl="torch", fwd_ms=1.0), make(op="gone")]
    m = matrix(records, OPS)
    assert m.ops == sorted(OPS) and m.impls == columns(OPS)
    assert m.cells["rms_norm", "compile"] == Cell(ALL, rows=2, current=1, statuses={"pass": 1}, speedup=2.0)
    assert m.cells["rms_norm", "torch"] == Cell(ALL, 1, 1, {"pass": 1}, None)  # the reference has no speedup
    assert m.cells["rms_norm", "sdpa:flash"].state == UNREGISTERED and m.cells["softmax", "compile"].state == EMPTY
    assert (m.rows, m.current, m.unregistered, m.ops_with_rows) == (4, 2, 1, 1)
    assert matrix([row(impl_hash="cccccccccccc")], OPS).cells["rms_norm", "compile"].state == STALE
    assert matrix([row(status="oom", fwd_ms=None)], OPS).cells["rms_norm", "compile"] == Cell(NONE, 1, 1, {"oom": 1})
    # no marks, padding or escapes in the data: a dashboard renders it its own way
    texts = [v for c in m.cells.values() for v in (c.state, *c.statuses)]
    assert all(t.isascii() and t.isprintable() for t in texts)


def test_cells_carry_the_median_step_speedup_and_summaries_rebuild_the_matrix():
    from popcorn.bench.view import Summary, matrix_of, summarize

    records = [row(ref_fwd_ms=2.0, fwd_ms=1.0, ref_step_ms=6.0, step_ms=2.0, case_id="a"),
               row(ref_fwd_ms=2.0, fwd_ms=1.0, case_id="b"), row(impl="torch", fwd_ms=2.0, step_ms=6.0)]
    m = matrix(records, OPS)
    assert m.cells["rms_norm", "compile"].step_speedup == 3.0  # over the rows with both step times
    assert m.cells["rms_norm", "torch"].step_speedup is None
    pairs = {("rms_norm", i): summarize(OP, i, [r for r in records if r.impl == i]) for i in ("compile", "torch")}
    assert pairs["rms_norm", "compile"] == Summary(2, {"pass": 2}, 2.0, 3.0)
    assert matrix_of(pairs, OPS, len(records)) == m


def test_a_snapshot_published_before_a_column_existed_reads_in_todays_schema(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from popcorn.bench.record import arrow_schema, to_arrow
    from popcorn.bench.view import published, published_table

    old = to_arrow([make(case_id="old", canary_us=None)]).drop_columns(["canary_us", "step_host_us"])
    pq.write_table(old, tmp_path / "report-v1.parquet")
    (tmp_path / "CURRENT").write_text("1\n")
    monkeypatch.setenv("POPCORN_REPORT", str(tmp_path))
    assert published_table().schema == arrow_schema()
    (row,) = published()
    assert row.case_id == "old" and row.canary_us is None and row.step_host_us is None and row.fwd_ms == 0.5
