"""Kernel: one op (``?op=``): its math, named curves, slices with the command that extends them,
sparse coverage samples and the case table. Rows a followed live fill streams appear as stars."""

from datetime import timedelta

import pandas as pd
import streamlit as st

from dashboards import ceilings, curves, data, figures, frame, live_view, slices, sources
from popcorn.bench.plan import BATCH, dim_axes, primary_axis
from popcorn.schema import STATUSES

OPS = data.ops()
LIVE_REFRESH = timedelta(seconds=2)
source = st.session_state[data.SOURCE_KEY]


def pick_op(df: pd.DataFrame) -> str:
    """The op from ``?op=`` when it changed, else the selectbox; default: the op with most rows."""
    names = sorted(OPS)
    wanted = st.query_params.get("op")
    if wanted in OPS and wanted != st.session_state.get("_op_param"):
        st.session_state["op"] = wanted
    if st.session_state.get("op") not in OPS:
        counts = df["op"].value_counts()
        st.session_state["op"] = counts.index[0] if len(counts) and counts.index[0] in OPS else names[0]
    name = st.selectbox("op", names, key="op")
    st.query_params["op"] = st.session_state["_op_param"] = name
    return name


def header(op) -> None:
    st.title(op.name)
    st.markdown(op.summary)
    st.latex(op.math)
    if op.citations:
        st.caption(" · ".join(f"[{label}]({url})" for label, url in op.citations))
    st.caption("backends: " + ", ".join(f"`{n}`" for n in op.implementations)
               + (f" · tags: {', '.join(op.tags)}" if op.tags else ""))


def axis_title(op, axis: str) -> str:
    return f"{axis} ({op.batch}: token rows)" if axis == BATCH else axis


def named_curves_section(op, rows: pd.DataFrame, live: pd.DataFrame, device: str) -> None:
    st.subheader("Named curves")
    have = curves.with_points(op, rows)
    if not have:
        st.info("No row lies on a named curve of the plan yet: `popcorn bench fill "
                f"{op.name} --curves-only` measures them.")
        return
    labels = {c.name: f"{curves.label(c)} ({n} points)" for c, n in have}
    by_name = {c.name: c for c, _ in have}
    name = st.selectbox("curve", list(labels), format_func=labels.get, key=f"curve:{op.name}")
    left, right = st.columns([3, 1])
    # one figure per rerun, not a tab per metric: building a plotly figure costs ~50 ms
    metric = left.radio("metric", list(figures.METRICS), horizontal=True, key="curve-metric",
                        format_func=lambda m: figures.METRICS[m].title)
    timing = right.radio("timing", ["fwd", "bwd", "step"], horizontal=True, key="timing")
    curve = by_name[name]
    on = curves.rows_on(rows, curve)
    live_on = curves.rows_on(live, curve) if len(live) else None
    st.caption(f"{curve.name}: {curve.axis} varies; fixed {curve.fixed_dims}"
               + (f", batch {list(curve.batch)}" if curve.batch else "") + f", args {curve.args}"
               + (f", with {', '.join(curve.present)}" if curve.present else ""))
    fig = figures.curve_figure(on, metric, axis_title(op, curve.axis), timing, ceiling=ceilings.copy_ceiling(device),
                               live=live_on)
    st.plotly_chart(fig, key="curve-plot", width="stretch")


def slice_picker(op, rows: pd.DataFrame, axis: str) -> dict | None:
    """Selectboxes for dtype, each other dim, each scalar and the optional tensors, each offering only
    values some measured slice has given the choices above it; the chosen context."""
    found = slices.contexts(op, rows, axis)
    if found.empty:
        return None
    options = [slices.from_key(k) for k in found["key"]]
    names = ["dtype"] + [a for a in dim_axes(op) if a != axis] + list(op.scalars) + ["present"]
    chosen: dict = {}
    cols = st.columns(min(len(names), 4))
    for i, name in enumerate(names):
        left = [c for c in options if all(c.get(k) == v for k, v in chosen.items())]
        values = []
        for c in left:  # most points first: the default is the best-measured slice
            if c.get(name, None) not in values:
                values.append(c.get(name, None))
        if len(values) == 1 and values[0] is None:  # a dim this context does not have (absent optional)
            continue
        labels = [_display(name, v) for v in values]
        key = f"slice:{op.name}:{axis}:{name}"
        if st.session_state.get(key) not in labels:
            st.session_state[key] = labels[0]
        label = {"present": "optional tensors", BATCH: f"... ({op.batch})"}.get(name, name)
        picked = cols[i % len(cols)].selectbox(label, labels, key=key)
        chosen[name] = values[labels.index(picked)]
    return {k: v for k, v in chosen.items() if v is not None or k in op.scalars}


def _display(name: str, value) -> str:
    """A context value as a selectbox shows it."""
    if name == "present":
        return " ".join(f"+{n}" for n in value) or "none"
    if isinstance(value, str):
        return value
    return slices.context_key({"v": value})[6:-1]  # JSON: [8], 1e-06, true, null


def slices_section(op, rows: pd.DataFrame, live: pd.DataFrame, device: str, port: int) -> None:
    st.subheader("Slices")
    st.caption("Fix dtype, the other dims and the scalar args; vary one axis.")
    axes = dim_axes(op)
    axis = st.selectbox("vary", axes, index=axes.index(primary_axis(op)) if primary_axis(op) in axes else 0,
                        key=f"slice-axis:{op.name}", format_func=lambda a: axis_title(op, a))
    context = slice_picker(op, rows, axis)
    if context is None:
        st.info("No measured rows to slice.")
        return
    on = slices.rows_on(op, rows, axis, context)
    on = on.assign(x=on[f"dim:{axis}"])
    live_on = slices.rows_on(op, live, axis, context) if len(live) else live
    if len(live_on):
        live_on = live_on.assign(x=live_on[f"dim:{axis}"])
    left, right = st.columns([3, 1])
    metric = right.radio("metric", list(figures.METRICS), key="slice-metric",
                         format_func=lambda m: figures.METRICS[m].title)
    timing = right.radio("timing ", ["fwd", "bwd", "step"], horizontal=True, key="slice-timing")
    with left:
        fig = figures.curve_figure(on, metric, axis_title(op, axis), timing, ceiling=ceilings.copy_ceiling(device),
                                   live=live_on if len(live_on) else None,
                                   title=f"slice · {figures.METRICS[metric].title}")
        st.plotly_chart(fig, key="slice-plot", width="stretch")
    planned = slices.planned_points(op, axis, context, curves.PLAN_BYTES)
    measured = on["case_id"].nunique()
    if planned is not None:
        st.caption(f"{measured} measured point(s) on this slice; the plan's slice has {len(planned)}.")
    with st.expander("Add data"):
        st.markdown("Measure this slice on your GPU and watch the points arrive here (Live fill page, or this "
                    "page while the fill runs):")
        st.code(slices.fill_command(op, axis, context, port=port), language="bash")
        st.caption("Cached rows of this slice stream first; add `--force` to measure them again. Points a "
                   "constraint repair would move off this context are left out.")


def coverage_section(op, rows: pd.DataFrame) -> None:
    st.subheader("Coverage samples")
    sparse = curves.coverage(op, rows)
    st.caption(f"{sparse['case_id'].nunique()} case(s) of the pairwise coverage plan, on no named curve: "
               "sparse samples over every value and pair of values, shown apart from the curves.")
    if len(sparse):
        st.plotly_chart(figures.coverage_figure(sparse), key="coverage", width="stretch")


CASE_COLUMNS = ["impl", "case", "dtype", "grad", "status", "reason", "fwd_ms", "bwd_ms", "step_ms", "speedup",
                "step_speedup", "fwd_mem_mb", "step_mem_mb", "err_ratio", "device", "canary_us", "current", "ts"]


def case_table(rows: pd.DataFrame) -> None:
    st.subheader("Cases")
    present = [s for s in STATUSES if s in set(rows["status"])]
    left, right = st.columns(2)
    statuses = left.multiselect("status", present, default=present, key="case-status")
    impls = right.multiselect("backend", frame.backends(rows), default=frame.backends(rows), key="case-impl")
    shown = rows[rows["status"].isin(statuses) & rows["impl"].isin(impls)][CASE_COLUMNS]
    st.dataframe(shown, key="cases", hide_index=True, column_config={
        "speedup": st.column_config.NumberColumn("fwd speedup", format="%.2fx"),
        "step_speedup": st.column_config.NumberColumn("step speedup", format="%.2fx"),
        "err_ratio": st.column_config.NumberColumn("err / cutoff", format="%.3g"),
        "fwd_ms": st.column_config.NumberColumn(format="%.4f"),
        "bwd_ms": st.column_config.NumberColumn(format="%.4f"),
        "step_ms": st.column_config.NumberColumn(format="%.4f"),
        "canary_us": st.column_config.NumberColumn("canary us", format="%.3f",
                                                   help="the device state a row was timed in (popcorn.bench.device_state)"),
    })
    st.caption(f"{len(shown):,} of {len(rows):,} rows; click a column header to sort.")


df = data.read_or_explain(source)
if df is None:
    st.stop()
op = OPS[pick_op(df)]
header(op)
follow = live_view.follow_remembered(op.name)
rows = data.op_rows(source, op.name)
if rows.empty:
    st.info(f"The {sources.LABELS[source]} has no rows of {op.name}. Measure some with `popcorn bench fill {op.name}`.")
    st.stop()
with st.sidebar:
    devices = rows["device"].value_counts()
    device = st.selectbox("device", list(devices.index), key="device") if len(devices) > 1 else devices.index[0]
    stale = st.checkbox("include stale rows", key="stale",
                        help="rows measured against older reference or backend code; they decide nothing")
rows = rows[rows["device"] == device]
if not stale:
    if not rows["current"].any():
        st.warning("Every row of this op is stale (measured against older code); tick 'include stale rows' in "
                   "the sidebar to see them.")
    rows = rows[rows["current"]]
live = live_view.live_rows(follow, op)


def curves_following() -> None:
    """The named curves, reading the fill's stream again on each timed rerun while it runs."""
    f = live_view.follow(follow.port, budget=0.3) if follow.running else follow
    named_curves_section(op, rows, live_view.live_rows(f, op), device)


# While a fill runs, the curves rerun alone every few seconds so its rows appear as they are measured.
st.fragment(run_every=LIVE_REFRESH if follow.running else None)(curves_following)()
slices_section(op, rows, live, device, follow.port)
coverage_section(op, rows)
case_table(rows)
