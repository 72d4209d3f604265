"""Test helpers: the explorer served by ``streamlit run``, and headless Chromium driven over CDP.

A plain ``chromium --headless --screenshot`` captures the page before Streamlit has rendered it
(the app draws over a websocket after the load event; research/ecosystem.md section 5), so the
helper drives Chromium over the DevTools protocol: navigate, poll a readiness expression, then
take the screenshot and the rendered DOM.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Flags from research/ecosystem.md and the machine notes: no sandbox as root, no background network
# (this machine refuses it), a fresh profile.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--window-size=1600,1800", "--hide-scrollbars"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 1.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait(what: str, ready, timeout: float, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready")
        try:
            value = ready()
            if value:
                return value
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def streamlit_app(env: dict, timeout: float = 90):
    """``streamlit run dashboards/app.py`` on a free loopback port; yields its base URL."""
    port = free_port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboards" / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            _wait("streamlit", lambda: _get(f"{base}/_stcore/health") == b"ok", timeout, proc)
        except (RuntimeError, TimeoutError) as e:
            log.seek(0)
            raise RuntimeError(f"{e}; its output:\n{log.read().decode(errors='replace')[-3000:]}") from None
        yield base
    finally:
        _stop(proc)
        log.close()


class Page:
    """One Chromium tab over CDP (the ``websockets`` package's sync client)."""

    def __init__(self, ws):
        self.ws, self.n = ws, 0

    def call(self, method: str, **params) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> None:
        _wait(f"page condition {expression!r}", lambda: self.evaluate(expression), timeout)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML")


@contextmanager
def chromium_page(timeout: float = 30):
    """A headless Chromium with one tab; yields a :class:`Page`."""
    from websockets.sync.client import connect

    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium)")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="popcorn-chromium-")
    proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
                             f"--remote-debugging-port={port}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def tab():
            pages = [t for t in json.loads(_get(f"http://127.0.0.1:{port}/json/list")) if t.get("type") == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        ws_url = _wait("chromium", tab, timeout, proc)
        with connect(ws_url, max_size=None, open_timeout=timeout) as ws:
            page = Page(ws)
            page.call("Page.enable")
            yield page
    finally:
        _stop(proc)
        shutil.rmtree(profile, ignore_errors=True)


def render(page: Page, url: str, ready: str, png: Path, timeout: float = 60) -> str:
    """Open ``url`` in ``page``, wait until the JS expression ``ready`` is true, screenshot to ``png``;
    returns the rendered DOM."""
    page.call("Page.navigate", url=url)
    page.wait_for(ready, timeout)
    time.sleep(1.0)  # plotly draws its SVG, and the sidebar slides in, after the elements appear
    page.screenshot(png)
    return page.dom()
