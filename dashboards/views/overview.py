"""Overview: the support matrix (op x backend) and the report's headline counts."""

import pandas as pd
import streamlit as st

from dashboards import data, sources, support
from popcorn.bench.view import ALL, EMPTY, MARKS, NONE, SOME, STALE

# Cell colours by state; a backend fastest somewhere for its op is marked ⚡ and bold.
STATE_CSS = {ALL: "background-color: #d8f0d2", SOME: "background-color: #fff1c1", NONE: "background-color: #f8d0cc",
             STALE: "background-color: #e6e6e6", EMPTY: "color: #999"}
FASTEST_CSS = "; font-weight: bold"

source = st.session_state[data.SOURCE_KEY]
st.title("popcorn kernel explorer")
df = data.read_or_explain(source)
if df is None:
    st.stop()
if df.empty:
    st.info(f"The {sources.LABELS[source]} holds no records yet. Measure with `popcorn bench fill OP`, "
            "then `popcorn bench merge` and `popcorn bench publish`; or pick another source in the sidebar.")
    st.stop()

counts = support.headline(df)
cols = st.columns(5)
cols[0].metric("rows", f"{counts['rows']:,}")
cols[1].metric("current rows", f"{counts['current']:,}", help="measured against today's reference and backend code")
cols[2].metric("ops", counts["ops"])
cols[3].metric("backends", counts["backends"])
cols[4].metric("devices", counts["devices"])
status_cols = st.columns(max(1, len(counts["statuses"])))
for c, (status, n) in zip(status_cols, counts["statuses"].items()):
    c.metric(status, f"{n:,}")

st.subheader("Support matrix")
s = data.support_of(source)
table = support.table(s)
m = s.matrix


def _styles(frame: pd.DataFrame) -> pd.DataFrame:
    css = pd.DataFrame("", index=frame.index, columns=frame.columns)
    for op in frame.index:
        for impl in frame.columns:
            cell = m.cells[op, impl]
            css.loc[op, impl] = STATE_CSS.get(cell.state, "") + (FASTEST_CSS if (op, impl) in s.fastest else "")
    return css


widths = {impl: st.column_config.TextColumn(impl, width=110) for impl in table.columns}  # fits "⚡ ✔ 12.3x / 4.5x"
selected = st.dataframe(table.style.apply(_styles, axis=None), key="matrix", on_select="rerun",
                        selection_mode="single-row", height=min(36 * (len(table) + 1) + 4, 820),
                        column_config={"_index": st.column_config.TextColumn("op", width=170), **widths})
st.caption(f"{MARKS[ALL]} every current row passes · {MARKS[SOME]} some pass (the rest gated, failed or "
           f"unverified) · {MARKS[NONE]} none passes · {MARKS[STALE]} only stale rows · {MARKS[EMPTY]} no rows · "
           "blank: not registered. Nx / Mx: median forward / step speedup over the reference on current timed "
           "pass rows. ⚡: the fastest backend on at least one case of the op. "
           "Select a row to open the op.")
rows = selected.selection.rows if selected else []
if rows:
    st.switch_page("views/kernel.py", query_params={"op": table.index[rows[0]]})
