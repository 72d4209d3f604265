"""A stand-in for ``popcorn bench fill --live``'s server, speaking its protocol on 127.0.0.1.

``GET /v1/status``: the status JSON; ``GET /v1/events``: ``session``, the buffered ``record``
events after ``Last-Event-ID`` (``id:`` = sequence, data = the record dict), a ``progress``, then
either ``complete`` and close, or (``hold=True``) keepalive comments until the client leaves, as
a fill still measuring does.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeFill:
    def __init__(self, records: list[dict], total: int | None = None, hold: bool = False, wrap: bool = False):
        self.records, self.hold, self.wrap = records, hold, wrap
        self.session = uuid.uuid4().hex
        self.total = total if total is not None else len(records)

    def status(self) -> dict:
        statuses: dict[str, int] = {}
        for r in self.records:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        return {"service": "popcorn.bench.live", "protocol": 1, "session": self.session,
                "state": "running" if self.hold else "complete", "command": "fill", "device": "NVIDIA H200",
                "ops": sorted({r["op"] for r in self.records}), "total": self.total,
                "completed": len(self.records), "measured": len(self.records), "cached": 0, "pruned": 0,
                "skipped": 0, "statuses": statuses, "error": None}


def _handler(fill: FakeFill):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, text: str) -> None:
            self.wfile.write(text.encode())
            self.wfile.flush()

        def do_GET(self):
            if self.path.startswith("/v1/status"):
                body = json.dumps(fill.status()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if not self.path.startswith("/v1/events"):
                self.send_error(404)
                return
            after = int(self.headers.get("Last-Event-ID") or 0)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self._send(f"event: session\ndata: {json.dumps(fill.status())}\n\n")
            for seq, r in enumerate(fill.records, start=1):
                if seq > after:
                    data = {"record": r} if fill.wrap else r
                    self._send(f"event: record\nid: {seq}\ndata: {json.dumps(data)}\n\n")
            self._send(f"event: progress\ndata: {json.dumps(fill.status())}\n\n")
            if not fill.hold:
                self._send(f"event: complete\ndata: {json.dumps(fill.status())}\n\n")
                return
            try:
                for _ in range(100):  # a running fill: keepalives until the client leaves (bounded)
                    time.sleep(0.1)
                    self._send(": keepalive\n\n")
            except OSError:
                pass

    return Handler


@contextmanager
def serving(fill: FakeFill):
    """Serve ``fill`` on a free loopback port; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fill))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def not_popcorn():
    """Something else on a port: answers every GET with HTML."""
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
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
