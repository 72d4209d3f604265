"""The explorer's tests read a fixture report (tests/dashboards/report.py) published under tmp_path,
an empty user cache and no store, unless a test writes them."""

from pathlib import Path

import pytest

from . import report

APP = str(Path(__file__).resolve().parents[2] / "dashboards" / "app.py")


@pytest.fixture
def explorer_env(tmp_path, monkeypatch):
    """POPCORN_REPORT -> the fixture report, POPCORN_CACHE_DIR -> an empty cache, POPCORN_STORE -> none;
    Streamlit's caches cleared (they live as long as the process)."""
    import streamlit as st

    published = report.write_published(report.rows(), tmp_path / "published")
    env = {"POPCORN_REPORT": str(published), "POPCORN_CACHE_DIR": str(tmp_path / "cache"),
           "POPCORN_STORE": str(tmp_path / "store")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    st.cache_data.clear()
    st.cache_resource.clear()
    return env


@pytest.fixture
def app(explorer_env):
    """An AppTest of dashboards/app.py (not yet run)."""
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(APP, default_timeout=60)
