"""Live fill: follow a running ``popcorn bench fill OP --live [PORT]``: its status, progress, status
counts and last records, and the streamed rows as highlighted points on their curves."""

from datetime import timedelta

import pandas as pd
import streamlit as st

from dashboards import curves, data, figures, live_view, sources
from dashboards.live_client import DEFAULT_PORT

REFRESH = timedelta(seconds=2)  # while a fill runs, the status and stream are read again this often
LAST = 100  # records listed

st.title("Live fill")
source = st.session_state[data.SOURCE_KEY]


def port_input() -> int | None:
    port = live_view.remembered_port()
    if "live_port_input" not in st.session_state:
        st.session_state["live_port_input"] = str(port)
    raw = st.text_input("port of `popcorn bench fill --live`", key="live_port_input",
                        help=f"the fill's --live port; {DEFAULT_PORT} unless you gave another")
    if not raw.strip().isdigit() or not 0 < int(raw) < 65536:
        st.error(f"{raw!r} is not a port number (1-65535)")
        return None
    live_view.remember(int(raw))
    return int(raw)


def records_table(rows: list[dict]) -> pd.DataFrame:
    shown = []
    for r in rows[-LAST:][::-1]:
        speedup = r["ref_fwd_ms"] / r["fwd_ms"] if r.get("fwd_ms") and r.get("ref_fwd_ms") else None
        shown.append({"op": r.get("op"), "backend": r.get("impl"), "status": r.get("status"), "case": r.get("case"),
                      "fwd_ms": r.get("fwd_ms"), "bwd_ms": r.get("bwd_ms"), "speedup": speedup,
                      "reason": r.get("reason")})
    return pd.DataFrame(shown)


def overlays(f) -> None:
    """Per op streamed: the named curve of its latest row, the report's rows as lines, streamed rows as stars."""
    ops = data.ops()
    for name in dict.fromkeys(r.get("op") for r in reversed(f.rows)):
        if name not in ops:
            continue
        op = ops[name]
        live = live_view.live_rows(f, op)
        if live.empty:
            continue
        latest = live.iloc[-1]["case_id"]
        curve = next((c for c in curves.named_curves(op) if latest in c.case_ids), None)
        if curve is None:
            st.caption(f"{name}: the latest streamed case lies on no named curve (a coverage sample).")
            continue
        try:
            rows = data.op_rows(source, name)
        except Exception:  # the source may be unreadable; the streamed points still show
            rows = live.iloc[0:0]
        rows = rows[rows["current"]] if "current" in rows else rows
        device = f.status.get("device") if f.status else None
        if len(rows) and device not in set(rows["device"]):  # then the lines of the report's main device
            if device:
                st.caption(f"{name}: the {sources.LABELS[source]} has no rows on {device}; the lines are "
                           f"{rows['device'].mode()[0]}'s.")
            device = rows["device"].mode()[0]
        rows = rows[rows["device"] == device]
        fig = figures.curve_figure(curves.rows_on(rows, curve), "latency", curve.axis,
                                   live=curves.rows_on(live, curve))
        fig.update_layout(title=f"{name} · {curves.label(curve)}")
        st.plotly_chart(fig, key=f"live-{name}", width="stretch")
        st.page_link("views/kernel.py", label=f"open {name}", query_params={"op": name})


def show(port: int) -> None:
    f = live_view.follow(port)
    if f.problem:
        st.warning(f"{f.problem}. Is another program using port {port}? Give the fill another port: "
                   f"`popcorn bench fill OP --live 9000`, and enter it above.")
        return
    if not f.status:
        st.info(f"No fill is running on port {port}. Start one with `popcorn bench fill OP --live"
                + ("" if port == DEFAULT_PORT else f" {port}") + "`; this page looks again every few seconds.")
        if f.rows:
            st.caption(f"The last fill on this port streamed {len(f.rows)} row(s):")
            st.dataframe(records_table(f.rows), hide_index=True, key="last-records")
        return
    s = f.status
    planned, done = int(s.get("planned") or 0), int(s.get("done") or 0)
    st.markdown(f"**{s.get('state', '?')}** · {', '.join(s.get('ops') or {})} on {s.get('device') or '?'} "
                f"· session `{str(s.get('session', ''))[:8]}`")
    st.progress(min(1.0, done / planned) if planned else 0.0, text=f"{done} / {planned} pairs (op, backend, case)")
    # pairs by status, and those planning skipped (cached, gated) or a frontier pruned
    counts = {"measured": s.get("measured", 0), **(s.get("statuses") or {})}
    cols = st.columns(len(counts))
    for c, (k, n) in zip(cols, counts.items()):
        c.metric(k, n)
    if s.get("interrupted"):
        st.warning("The fill was interrupted; the same command measures the rest.")
    if s.get("error"):
        st.error(s["error"])
    st.subheader("Last records")
    if f.rows:
        st.dataframe(records_table(f.rows), hide_index=True, key="records", column_config={
            "speedup": st.column_config.NumberColumn(format="%.2fx")})
        overlays(f)
    else:
        st.caption("No record streamed yet.")


port = port_input()
if port is not None:
    # A fragment reruns alone on a timer: the page follows the fill without reloading the rest.
    st.fragment(run_every=REFRESH)(show)(port)
