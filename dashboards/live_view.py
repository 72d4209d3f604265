"""The followed live fill as the pages see it: the port (remembered in the session and ``?port=``),
one Follow per browser session, and its rows of one op as a frame ready to plot."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from . import data, frame
from .live_client import DEFAULT_PORT
from .live_state import Follow

PORT_KEY = "live_port"


def remembered_port() -> int:
    """The port last entered on the Live page (this session), else ``?port=``, else 8765."""
    if PORT_KEY not in st.session_state:
        raw = st.query_params.get("port", "")
        st.session_state[PORT_KEY] = int(raw) if raw.isdigit() and 0 < int(raw) < 65536 else DEFAULT_PORT
    return st.session_state[PORT_KEY]


def remember(port: int) -> None:
    st.session_state[PORT_KEY] = port
    if port == DEFAULT_PORT:
        st.query_params.pop("port", None)
    else:
        st.query_params["port"] = str(port)


def follow(port: int, budget: float = 0.8) -> Follow:
    """This session's Follow, polled now: status, and the rows streamed since the last poll."""
    f = st.session_state.setdefault("follow", Follow(port=port))
    return f.poll(port, budget=budget)


def follow_remembered(op: str) -> Follow:
    """Poll the remembered port (a closed port answers at once) and say in the sidebar when a fill runs."""
    f = follow(remembered_port(), budget=0.5)
    if f.status:
        s = f.status
        done, planned = s.get("done", 0), s.get("planned", 0)
        st.sidebar.success(f"fill {s.get('state', '?')} on port {f.port}: {done}/{planned} "
                           f"· {len(f.rows_of(op))} row(s) of {op} streamed")
        st.sidebar.page_link("views/live.py", label="Live fill page")
    return f


def live_rows(f: Follow, op) -> pd.DataFrame:
    """The rows of ``op`` the fill streamed, decoded like the report's (dashboards.frame.op_frame)."""
    rows = f.rows_of(op.name)
    if not rows:
        return pd.DataFrame()
    return frame.op_frame(frame.rows_frame(rows, data.ops()), op)
