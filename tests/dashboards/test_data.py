"""The explorer's data side without Streamlit: frames, the matrix, slices and their fill command, figures."""

import json
import shlex

import pytest

from dashboards import curves, figures, frame, slices, support
from popcorn.bench import store
from popcorn.bench.plan import case_plan, dim_axes, slice_cases
from popcorn.bench.record import to_arrow
from popcorn.bench.slice_spec import parse_slice
from popcorn.bench.view import matrix
from popcorn.kernels import OPS
from popcorn.schema import is_current_for

from . import report


@pytest.fixture(scope="module")
def records():
    return report.rows()


@pytest.fixture(scope="module")
def df(records):
    return frame.records_frame(to_arrow(records), OPS)


def test_current_and_speedups_follow_the_schema(records, df):
    assert df["current"].tolist() == [r.op in OPS and is_current_for(r, OPS[r.op]) for r in records]
    passed = df[(df["status"] == "pass") & (df["impl"] == "compile")]
    assert passed["speedup"].round(6).eq(2.0).all()


def test_the_matrix_is_bench_views(records, df):
    assert support.support(df, OPS).matrix == matrix(records, OPS)
    assert support.fastest(df) == {("rms_norm", "compile"), ("rms_norm", "liger"), ("softmax", "torch")}


def test_merge_frames_is_the_stores_merge_rule(records, df):
    newer = [r.__class__.from_dict(r.to_dict() | {"ts": "2026-12-02T00:00:00+00:00", "fwd_ms": 9.0})
             for r in records[:3]]
    older_fail = records[3].__class__.from_dict(records[3].to_dict() | {"status": "timeout", "ts": "2027-01-01"})
    merged = frame.merge_frames(df, frame.records_frame(to_arrow(newer + [older_fail]), OPS))
    expected = store.merge(records, newer + [older_fail])
    key = lambda rows: sorted((r["case_id"], r["impl"], r["ts"], r["status"]) for r in rows)  # noqa: E731
    assert key(merged.to_dict("records")) == key([r.to_dict() for r in expected])


CASES_PER_OP = 8


def contexts_of_plans():
    """Slice contexts through every axis of planned cases of every op (coverage rows and curve points)."""
    for name, op in sorted(OPS.items()):
        plan = case_plan(op, curves.PLAN_BYTES)
        step = max(1, len(plan.cases) // CASES_PER_OP)
        for p in plan.cases[::step]:
            for axis in dim_axes(op):
                yield pytest.param(op, axis, slices.context_of(op, axis, json.dumps(p.case.config())),
                                   id=f"{name}-{axis}-{p.case.case_id}")


@pytest.mark.parametrize("op, axis, context", list(contexts_of_plans()))
def test_the_fill_command_parses_back_into_the_same_slice(op, axis, context):
    command = slices.fill_command(op, axis, context)
    tokens = shlex.split(command)
    assert tokens[:6] == ["popcorn", "bench", "fill", op.name, "--live", "--timeout"]
    assert parse_slice(op, tokens[tokens.index("--slice") + 1:]) == (axis, context)
    slice_cases(op, axis, context, curves.PLAN_BYTES)  # the planner takes it


def test_the_fill_command_of_the_spec():
    context = {"dtype": "float16", "...": [8], "eps": 1e-6, "present": ()}
    assert slices.fill_command(OPS["rms_norm"], "normalized_shape", context) == (
        "popcorn bench fill rms_norm --live --timeout 300 --slice normalized_shape dtype=float16 '...=[8]' "
        "eps=0.000001")
    assert "--live 9000 --timeout" in slices.fill_command(OPS["rms_norm"], "normalized_shape", context, port=9000)


@pytest.mark.parametrize("port", [8765, 9000])
def test_the_popcorn_command_line_reads_the_fill_command(port):
    from popcorn.cli import _parser

    context = {"dtype": "bfloat16", "...": [4096], "eps": 1e-5, "present": ()}
    command = slices.fill_command(OPS["rms_norm"], "normalized_shape", context, port=port)
    args = _parser().parse_args(shlex.split(command)[1:])
    assert (args.ops, args.live, args.timeout) == (["rms_norm"], port, 300.0)
    assert parse_slice(OPS["rms_norm"], args.slice) == ("normalized_shape", context)


def test_slice_rows_are_exactly_the_context(df):
    rows = frame.op_frame(df, OPS["rms_norm"])
    found = slices.contexts(OPS["rms_norm"], rows, "normalized_shape")
    best = slices.from_key(found["key"][0])
    assert best["dtype"] == "bfloat16" and found["points"][0] == 6
    on = slices.rows_on(OPS["rms_norm"], rows, "normalized_shape", best)
    assert set(on["dtype"]) == {"bfloat16"} and on["dim:normalized_shape"].nunique() == 6


def test_op_frame_decodes_cases_traffic_and_error(df):
    rows = frame.op_frame(df, OPS["rms_norm"])
    r = rows[rows["case_id"] == report.planned("rms_norm", report.BF16_CURVE, 1)[0].case.case_id].iloc[0]
    n, tokens = r["dim:normalized_shape"], r["dim:..."]
    # x and y read once, w read once, y written once, in bf16
    assert r["bytes"] == 2 * (2 * tokens * n + n) and r["out_elements"] == tokens * n
    assert rows.loc[rows["status"] == "pass", "err_ratio"].lt(1).all()
    assert rows.loc[rows["status"] == "fail", "err_ratio"].gt(1).all()


def test_curve_figure_lines_live_points_and_ceiling(df):
    rows = frame.op_frame(df, OPS["rms_norm"])
    rows = rows[rows["current"]]
    curve = next(c for c in curves.named_curves(OPS["rms_norm"]) if c.name == report.BF16_CURVE)
    on = curves.rows_on(rows, curve)
    live = on[on["impl"] == "compile"].head(2)
    fig = figures.curve_figure(on, "bandwidth", "normalized_shape", ceiling=4300.0, live=live)
    assert [t.name for t in fig.data] == ["torch", "compile", "liger", "live · compile"]
    assert fig.data[-1].marker.symbol == "star" and len(fig.data[-1].x) == 2
    assert any(s.y0 == 4300.0 for s in fig.layout.shapes)
    assert fig.layout.xaxis.type == "log"
    elsewhere = figures.curve_figure(on, "latency", "normalized_shape", live=live.assign(device="cpu:x86_64"))
    assert elsewhere.data[-1].name == "live · compile (cpu:x86_64)"  # a fill on another device says so
