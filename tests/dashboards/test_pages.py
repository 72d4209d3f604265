"""Every page of the explorer through Streamlit's AppTest, on the fixture report (report.py)."""

import base64
import shlex

import numpy as np
import plotly.io as pio

from popcorn.bench.slice_spec import parse_slice
from popcorn.kernels import OPS

from . import report


def charts(at) -> list:
    """The plotly figures on the page (their specs read back; plotly 7 packs arrays as base64)."""
    return [pio.from_json(c.proto.spec) for c in at.get("plotly_chart")]


def titled(at, prefix: str):
    found = [f for f in charts(at) if f.layout.title.text.startswith(prefix)]
    assert found, [f.layout.title.text for f in charts(at)]
    return found[0]


def values(array) -> list:
    """A trace's x or y: plotly 7 packs numeric arrays as {"dtype", "bdata": base64}."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def names(fig) -> set:
    return {t.name for t in fig.data if t.name}


def messages(at) -> str:
    return "\n".join(str(e.value) for kind in ("info", "warning", "error", "success", "caption", "markdown")
                     for e in getattr(at, kind))


def test_overview_matrix_and_counts(app):
    at = app.run()
    assert not at.exception
    table = at.dataframe[0].value
    for (op, impl), text in report.EXPECTED.items():
        assert table.loc[op, impl] == text, (op, impl, table.loc[op, impl])
    liger = table.loc["rms_norm", "liger"]
    assert liger.startswith("⚡ ✔*"), liger  # one failed case, and the fastest on another
    assert "gone" not in table.index  # an op no longer registered is counted, not shown
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["rows"] == str(len(report.rows()))
    assert metrics["ops"] == "3" and metrics["devices"] == "1" and metrics["fail"] == "4"


def test_the_kernel_page_opens_on_the_op_in_the_url(app):
    at = app.run()
    at.query_params["op"] = "softmax"
    at.switch_page("views/kernel.py").run()
    assert not at.exception
    assert at.title[0].value == "softmax" and at.selectbox(key="op").value == "softmax"


def test_kernel_page_shows_math_curves_coverage_and_cases(app):
    at = app.run()
    at.query_params["op"] = "rms_norm"
    at.switch_page("views/kernel.py").run()
    assert not at.exception
    assert at.title[0].value == "rms_norm"
    assert OPS["rms_norm"].math in [e.value for e in at.latex][0]
    curve = titled(at, "latency")
    assert names(curve) == {"torch", "compile", "liger"}  # fla is stale: hidden
    assert len(values(curve.data[0].x)) == 6  # the bf16 curve: 6 points
    coverage = titled(at, "coverage samples")
    assert names(coverage) == {"compile", "liger"}
    cases = at.dataframe[-1].value  # the case table, last on the page
    assert set(cases["status"]) == {"pass", "fail"} and "reason" in cases
    assert set(cases.loc[cases["status"] == "pass", "canary_us"].dropna()) == {1.29}  # the state each was timed in
    assert not (cases["impl"] == "fla").any()

    at.checkbox(key="stale").check().run()  # stale rows on request
    assert "fla" in names(titled(at, "latency"))

    for metric in ("throughput", "bandwidth", "memory", "error"):
        at.radio(key="curve-metric").set_value(metric).run()
        assert not at.exception, metric
    assert any(s.y0 == 1.0 for s in titled(at, "error").layout.shapes)  # the cutoff


def test_a_slice_selection_changes_the_plotted_series(app):
    at = app.run()
    at.query_params["op"] = "rms_norm"
    at.switch_page("views/kernel.py").run()
    before = titled(at, "slice")
    assert len(values(before.data[0].x)) == 6  # the best-measured slice: the bf16 curve's context
    dtype = at.selectbox(key="slice:rms_norm:normalized_shape:dtype")
    assert dtype.value == "bfloat16" and "float32" in dtype.options
    dtype.set_value("float32").run()
    assert not at.exception
    after = titled(at, "slice")
    assert len(values(after.data[0].x)) == 4
    assert values(after.data[0].y) != values(before.data[0].y)


def test_add_data_command_parses_back_into_the_plotted_slice(app):
    at = app.run()
    at.query_params["op"] = "rms_norm"
    at.switch_page("views/kernel.py").run()
    at.selectbox(key="slice:rms_norm:normalized_shape:dtype").set_value("float32").run()
    command = at.code[0].value
    assert command.startswith("popcorn bench fill rms_norm --live --timeout 300 --slice normalized_shape ")
    tokens = shlex.split(command)
    axis, context = parse_slice(OPS["rms_norm"], tokens[tokens.index("--slice") + 1:])
    fp32 = report.planned("rms_norm", report.FP32_CURVE, 4)
    assert axis == "normalized_shape"
    assert context == {"dtype": "float32", "...": list(fp32[0].case.batch), "eps": fp32[0].case.args["eps"],
                       "present": ()}


def test_live_page_says_when_nothing_listens(app):
    from .browser import free_port

    port = free_port()
    at = app.run()
    at.switch_page("views/live.py").run()
    at.text_input(key="live_port_input").input(str(port)).run()
    assert not at.exception
    assert f"No fill is running on port {port}" in messages(at)
    assert at.query_params["port"] == [str(port)] or at.query_params["port"] == str(port)


def test_sources_in_the_sidebar(app, explorer_env, tmp_path):
    from popcorn.bench import store

    extra = report.record("rms_norm", "quack", report.planned("rms_norm", report.BF16_CURVE, 1)[0],
                          time_ms=0.001, ref_ms=0.01)
    store.write([extra])  # the user cache of this test
    at = app.run()
    at.sidebar.radio(key="source").set_value("user").run()
    assert not at.exception
    assert at.metric[0].value == "1"
    at.sidebar.radio(key="source").set_value("published+user").run()
    assert at.metric[0].value == str(len(report.rows()) + 1)
    assert at.dataframe[0].value.loc["rms_norm", "quack"].endswith("10.0x")
    at.sidebar.radio(key="source").set_value("store").run()
    assert not at.exception and "holds no records" in messages(at)


def test_the_delta_store_as_source(app, explorer_env):
    from popcorn.bench.delta import ReportStore

    ReportStore(explorer_env["POPCORN_STORE"]).merge(report.rows()[:10])
    at = app.run()
    at.sidebar.radio(key="source").set_value("store").run()
    assert not at.exception and at.metric[0].value == "10"
    assert at.dataframe[0].value.loc["rms_norm", "compile"].startswith("⚡ ✔")
