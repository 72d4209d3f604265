"""The popcorn kernel explorer: ``streamlit run dashboards/app.py``.

Pages: Overview (the support matrix and headline counts), Kernel (one op: its math, named curves,
slices with the fill command that extends them, coverage samples, the case table) and Live fill
(follow a running ``popcorn bench fill --live``). The sidebar picks the records: the published
report, the Delta report store, the user cache, or the published report with the user cache.
"""

import sys
from pathlib import Path

# `streamlit run` puts this file's folder on sys.path, not the checkout: the pages import dashboards.*
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboards import data  # noqa: E402

st.set_page_config(page_title="popcorn kernel explorer", layout="wide")

PAGES = Path(__file__).parent / "views"  # not pages/: that name makes Streamlit also serve each file on its own
navigation = st.navigation([
    st.Page(PAGES / "overview.py", title="Overview", url_path="overview", default=True),
    st.Page(PAGES / "kernel.py", title="Kernel", url_path="kernel"),
    st.Page(PAGES / "live.py", title="Live fill", url_path="live"),
])
data.pick_source()
navigation.run()
