"""The explorer in a real browser: ``streamlit run dashboards/app.py`` and headless Chromium over CDP.

Screenshots of the overview (the matrix) and of a kernel page (a rendered curve) are kept under
``$POPCORN_SCREENSHOTS`` when set (else the test's tmp_path); the asserts read the rendered DOM.
"""

import os
from pathlib import Path

import pytest

from . import report
from .browser import chromium, chromium_page, render, streamlit_app

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (Debian's package "
                                "`chromium`; .ci/run installs it)")

# Rendered: the element is there and Streamlit's "running" widget is gone.
IDLE = "!document.querySelector('[data-testid=stStatusWidget]')"
MATRIX_READY = f"!!document.querySelector('[data-testid=stDataFrame] [role=gridcell]') && {IDLE}"
PLOT_READY = f"!!document.querySelector('.js-plotly-plot .main-svg .scatterlayer .trace') && {IDLE}"


@pytest.fixture
def screenshots(tmp_path) -> Path:
    out = Path(os.environ.get("POPCORN_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_the_served_app_renders_the_matrix_and_a_curve(explorer_env, screenshots):
    with streamlit_app(explorer_env) as base, chromium_page() as page:
        dom = render(page, f"{base}/", MATRIX_READY, screenshots / "overview.png")
        for op in ("rms_norm", "softmax", "attn"):
            assert f">{op}</td>" in dom, op  # the matrix's rows, in the grid's accessible table
        assert report.EXPECTED[("rms_norm", "compile")] in dom
        assert "Support matrix" in dom

        kernel = render(page, f"{base}/kernel?op=rms_norm", PLOT_READY, screenshots / "kernel.png")
        assert "js-plotly-plot" in kernel and "Named curves" in kernel
        assert kernel.count('class="trace scatter') >= 3  # torch, compile, liger lines on the curve
        assert "Slices" in kernel and "Add data" in kernel and "Coverage samples" in kernel

    for name in ("overview.png", "kernel.png"):
        png = screenshots / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 50_000, name
