"""Servers for the live tests: popcorn's own live stream (popcorn.bench.live) fed rows directly, as a
fill feeds it, and something else on a port (a plain HTML server)."""

from __future__ import annotations

import io
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from popcorn.bench.live import LiveServer

DEVICE = "NVIDIA H200"


@contextmanager
def live_fill(records: list, planned: int | None = None, running: bool = True):
    """A LiveServer on a free port whose fill planned ``planned`` pairs (default: one per record) and has
    measured ``records``; ``running=False``: the fill has completed. Yields the port."""
    server = LiveServer(0, out=io.StringIO(), keepalive_s=0.2, linger_s=0.2, cache_wait=0)
    server.start()
    try:
        op = records[0].op if records else "rms_norm"
        pairs = [(r.op, None) for r in records] + [(op, None)] * max(0, (planned or len(records)) - len(records))
        server.session.plan(pairs, DEVICE, replay=[])
        for r in records:
            server.session.count(r.op, r)
        if not running:
            server.session.complete()
        yield server.port
    finally:
        server.close()


@contextmanager
def not_popcorn():
    """Something else on a port: answers every GET with HTML. Yields the port."""
    class Other(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
