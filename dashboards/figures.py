"""Plotly figures from frames: curves (one line per backend), live points over them, coverage samples.

Builders take frames (dashboards.frame.op_frame rows) and return ``go.Figure``; nothing here
imports streamlit, so tests check the traces directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go

from popcorn.schema import PASS, REFERENCE

# Fixed colours per backend family, so a backend looks the same on every plot.
FAMILY_COLOURS = {REFERENCE: "#7f7f7f", "compile": "#1f77b4", "liger": "#2ca02c", "fla": "#ff9f1c",
                  "quack": "#d62728", "popcorn": "#17becf", "sdpa": "#9467bd", "cudnn": "#8c564b",
                  "fa4": "#3f51b5", "transformer_engine": "#bcbd22", "unsloth": "#e377c2"}
_OTHERS = ("#8c564b", "#e377c2", "#bcbd22", "#393b79", "#637939", "#843c39")
LIVE_COLOUR = "#000000"


@dataclass(frozen=True)
class Metric:
    title: str
    column: str  # a column of the op frame; "{t}" stands for the timing (fwd, bwd, step)
    axis: str
    log_y: bool = True


METRICS = {
    "latency": Metric("latency", "{t}_ms", "{t} time, ms (median; bars: p20-p80)"),
    "throughput": Metric("throughput", "throughput_gelems", "forward throughput, output Gelem/s"),
    "bandwidth": Metric("effective bandwidth", "bandwidth_gbs", "forward effective bandwidth, GB/s"),
    "memory": Metric("peak memory", "{m}_mem_mb", "{m} peak memory above baseline, MB"),
    "error": Metric("error vs cutoff", "err_ratio", "forward error / cutoff (above 1 fails)"),
}


def colour(impl: str) -> str:
    family = impl.split(":")[0]
    if family in FAMILY_COLOURS:
        return FAMILY_COLOURS[family]
    return _OTHERS[sum(map(ord, family)) % len(_OTHERS)]


def column(metric: Metric, timing: str) -> str:
    """The frame column a metric reads for a timing (memory: forward, else the whole step)."""
    return metric.column.format(t=timing, m="fwd" if timing == "fwd" else "step")


def _hover(rows: pd.DataFrame) -> list[str]:
    return [f"{c}<br>{s}" + (f": {r}" if isinstance(r, str) and r else "")
            for c, s, r in zip(rows["case"], rows["status"], rows["reason"])]


def curve_figure(rows: pd.DataFrame, metric: str, x_title: str, timing: str = "fwd", ceiling: float | None = None,
                 live: pd.DataFrame | None = None, title: str | None = None) -> go.Figure:
    """One line per backend of ``metric`` against ``x`` over ``rows`` (op-frame rows with an ``x``
    column). Latency gets p20-p80 bars; bandwidth a dashed line at the device's copy ceiling when
    known; error a line at the cutoff. ``live`` rows (same columns) are drawn as highlighted points."""
    m = METRICS[metric]
    col = column(m, timing)
    fig = go.Figure()
    ranked = rows[rows[col].notna()] if col in rows else rows.iloc[0:0]
    for impl in sorted(set(ranked["impl"]), key=lambda i: (i != REFERENCE, i)):
        r = ranked[ranked["impl"] == impl].sort_values("x")
        error_y = None
        if metric == "latency" and f"{timing}_q80_ms" in r:
            error_y = dict(type="data", array=(r[f"{timing}_q80_ms"] - r[col]).clip(lower=0),
                           arrayminus=(r[col] - r[f"{timing}_q20_ms"]).clip(lower=0), thickness=1, width=2)
        fig.add_trace(go.Scatter(x=r["x"], y=r[col], mode="lines+markers", name=impl, error_y=error_y,
                                 line=dict(color=colour(impl)), text=_hover(r),
                                 hovertemplate="%{text}<br>x=%{x}<br>y=%{y:.4g}<extra>" + impl + "</extra>"))
    if live is not None and len(live) and col in live:
        pts = live[live[col].notna()]
        plotted = set(rows["device"]) if "device" in rows else set()
        for (impl, device), p in pts.groupby(["impl", "device"], sort=True):
            # a fill on another device than the lines' says so in its legend entry
            name = f"live · {impl}" + (f" ({device})" if plotted and device not in plotted else "")
            fig.add_trace(go.Scatter(
                x=p["x"], y=p[col], mode="markers", name=name, text=_hover(p),
                marker=dict(size=14, symbol="star", color=colour(impl), line=dict(width=2, color=LIVE_COLOUR)),
                hovertemplate="live %{text}<br>x=%{x}<br>y=%{y:.4g}<extra>" + impl + "</extra>"))
    if metric == "bandwidth" and ceiling:
        fig.add_hline(y=ceiling, line_dash="dash", line_color="#444",
                      annotation_text=f"device copy ceiling {ceiling:.0f} GB/s")
    if metric == "error":
        fig.add_hline(y=1.0, line_dash="dash", line_color="#d62728", annotation_text="cutoff")
    y_title = m.axis.format(t=timing, m="fwd" if timing == "fwd" else "step")
    fig.update_layout(title=title or m.title, xaxis_title=x_title, yaxis_title=y_title, legend_title_text="backend",
                      margin=dict(l=10, r=10, t=40, b=10), height=380)
    fig.update_xaxes(type="log")
    if m.log_y:
        fig.update_yaxes(type="log")
    return fig


def coverage_figure(rows: pd.DataFrame) -> go.Figure:
    """Coverage samples: forward speedup over the reference against the bytes a case moves, per
    backend (timed pass rows; the reference sits at 1 by definition and is left out)."""
    fig = go.Figure()
    timed = rows[(rows["status"] == PASS) & rows["speedup"].notna() & (rows["impl"] != REFERENCE)]
    for impl in sorted(set(timed["impl"])):
        r = timed[timed["impl"] == impl]
        fig.add_trace(go.Scattergl(x=r["bytes"], y=r["speedup"], mode="markers", name=impl, text=_hover(r),
                                   marker=dict(color=colour(impl), size=7, opacity=0.75),
                                   hovertemplate="%{text}<br>%{x:.3s}B<br>%{y:.2f}x<extra>" + impl + "</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#7f7f7f")
    fig.update_layout(title="coverage samples: forward speedup over the reference",
                      xaxis_title="bytes the forward must move", yaxis_title=f"speedup over {REFERENCE}",
                      legend_title_text="backend", margin=dict(l=10, r=10, t=40, b=10), height=380)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return fig
