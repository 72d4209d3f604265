"""The explorer's data, cached across reruns, and the sidebar that picks the source.

Frames are cached per (source, token): a changed source (a new publish, a merge, a fill writing
the user cache) is read again, an unchanged one never. Pages take frames read-only.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from . import curves, frame, sources, support

SOURCE_KEY = "source"


@st.cache_resource(show_spinner=False)
def ops() -> dict:
    """The registered ops (importing the catalog costs a second or two: once per server)."""
    from popcorn.kernels import OPS

    return OPS


# cache_resource, not cache_data: cache_data keeps a pickle and unpickles it on every hit (a 100K-row
# frame is 93 MB, 0.1 s per rerun and a copy per session); the pages never mutate the frames.
@st.cache_resource(show_spinner="reading records...", max_entries=8)
def _frame(source: str, token: str) -> tuple[pd.DataFrame, str, int]:
    if source == sources.PUBLISHED_USER:
        published, _, _ = _frame(sources.PUBLISHED, sources.token(sources.PUBLISHED))
        user, _, bad = _frame(sources.USER, sources.token(sources.USER))
        return frame.merge_frames(published, user), sources.where(source), bad
    loaded = sources.read(source)
    return frame.records_frame(loaded.table, ops()), loaded.where, len(loaded.problems)


def records(source: str) -> tuple[pd.DataFrame, str, int]:
    """(frame, where it came from, unreadable lines skipped) of a source."""
    return _frame(source, sources.token(source))


@st.cache_resource(show_spinner=False, max_entries=8)
def _support(source: str, token: str) -> support.Support:
    return support.support(_frame(source, token)[0], ops())


def support_of(source: str) -> support.Support:
    return _support(source, sources.token(source))


@st.cache_resource(show_spinner=False, max_entries=64)
def _op_frame(source: str, token: str, op: str) -> pd.DataFrame:
    return frame.op_frame(_frame(source, token)[0], ops()[op])


def op_rows(source: str, op: str) -> pd.DataFrame:
    """One op's rows with their cases decoded (dashboards.frame.op_frame)."""
    return _op_frame(source, sources.token(source), op)


def named_curves(op: str) -> tuple:
    return curves.named_curves(ops()[op])


def pick_source() -> str:
    """The sidebar's source choice, remembered in the URL (``?source=``) and the session."""
    options = list(sources.LABELS)
    wanted = st.query_params.get(SOURCE_KEY)
    if SOURCE_KEY not in st.session_state:
        st.session_state[SOURCE_KEY] = wanted if wanted in options else sources.PUBLISHED
    source = st.sidebar.radio("Records from", options, key=SOURCE_KEY, format_func=sources.LABELS.get)
    if source != sources.PUBLISHED:
        st.query_params[SOURCE_KEY] = source
    elif SOURCE_KEY in st.query_params:
        del st.query_params[SOURCE_KEY]
    return source


def read_or_explain(source: str):
    """The source's frame, or None after explaining on the page why it cannot be read."""
    try:
        df, where, bad = records(source)
    except FileNotFoundError as e:
        st.warning(str(e))
        return None
    except Exception as e:  # a damaged store, an unreadable file: say which, keep the app up
        st.error(f"could not read the {sources.LABELS[source]}: {e}")
        return None
    st.sidebar.caption(f"{len(df):,} rows from `{where}`")
    if bad:
        st.sidebar.warning(f"{bad} unreadable line(s) skipped; `popcorn bench merge` names them")
    return df
