"""`popcorn up` on a fresh machine: the store is seeded with the bundled report, the Dagster UI and the
explorer answer on 127.0.0.1, and Ctrl-C stops both."""

import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from popcorn.bench.delta import ReportStore
from popcorn.bench.view import published

from .conftest import NEEDS_DAGSTER

pytest.importorskip("dagster", reason=NEEDS_DAGSTER)
pytest.importorskip("streamlit", reason="the explorer needs Streamlit: pip install -e '.[dashboard]'")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_up_seeds_the_store_serves_both_on_loopback_and_stops_both_on_ctrl_c(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "POPCORN_STORE": str(tmp_path / "store"),
           "POPCORN_CACHE_DIR": str(tmp_path / "cache")}
    ui, explorer = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "popcorn.cli", "up", "--ui-port", str(ui), "--explorer-port",
                             str(explorer)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    lines = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(line.startswith("Ctrl-C stops both") for line in lines):
            if select.select([proc.stdout], [], [], 1.0)[0]:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
        out = "".join(lines)
        assert "Ctrl-C stops both" in out, out + proc.stderr.read() if proc.poll() is not None else out
        assert f"Dagster UI: http://127.0.0.1:{ui}" in out and f"kernel explorer: http://127.0.0.1:{explorer}" in out
        assert f"seeded with the bundled report: {len(published())} rows" in out
        assert len(ReportStore(str(tmp_path / "store")).read()) == len(published()) > 0
        for port in (ui, explorer):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                assert r.status == 200
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
        assert proc.wait(60) == 0
        assert "stopped" in proc.stdout.read()
        for port in (ui, explorer):  # nothing is left listening
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
