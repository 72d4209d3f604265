"""The live fill stream: ``popcorn bench fill OPS --live [PORT]`` serves the rows of that fill, as they
are measured, to the kernel explorer on this machine.

Protocol 1: HTTP/1.1 on 127.0.0.1:PORT (default 8765), read-only, alive exactly as long as the fill.

- ``GET /v1/status``: the session as JSON: ``service`` ("popcorn-live"), ``protocol``, ``session`` (a
  uuid, new per fill), ``state`` ("running", then "complete"), ``device``, ``planned``/``done`` pairs
  (``to_measure``: planned less what planning skipped), ``measured``, ``statuses`` (pairs by status or
  why skipped: cached, gated, pruned), ``ops`` (the same per op), ``interrupted``, ``error``.
- ``GET /v1/events[?op=NAME]``: Server-Sent Events. ``session`` (the status) first; then the buffered
  ``record`` events whose id is past the ``Last-Event-ID`` header; then live ``record`` events (``id``:
  an integer increasing over the session, ``data``: the row, as :meth:`Record.to_dict` has it) and
  ``progress`` events (the status, after each pair counted), ``: keepalive`` comments when idle, and
  ``complete`` (the final status), after which the stream closes. ``op`` keeps one op's events.

Only rows this fill produces are streamed, except that a ``--slice`` fill first streams the cached
rows of its slice, so the explorer draws the slice whole. A fill with nothing to measure waits a few
seconds for a subscriber before it completes. A subscriber that falls :data:`QUEUE_SIZE` events behind
is dropped (its stream ends without ``complete``; reconnecting with ``Last-Event-ID`` resumes it), so
it never slows the fill.

Requests must name the loopback host and this port in ``Host`` (a DNS-rebinding page cannot) and come
from no page or a loopback one (``Origin``); anything else gets 403, methods other than GET and OPTIONS
405. The standard library alone: the server runs inside any fill.
"""

from __future__ import annotations

import errno
import queue
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from urllib.parse import parse_qs, urlsplit

from popcorn.core.settings import live_wait_s

from .live_session import PROTOCOL, QUEUE_SIZE, SERVICE, Session, dumps  # noqa: F401 - PROTOCOL: for clients
from .summary import Observer

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
CACHE_WAIT_S = 5.0  # a fill with nothing to measure waits this long for a subscriber ($POPCORN_LIVE_WAIT_S)
KEEPALIVE_S = 5.0  # idle streams get a comment this often: proxies and browsers keep them open
LINGER_S = 3.0  # at the end, how long subscribers get to read the ``complete`` event
SOCKET_TIMEOUT_S = 10.0  # a write to a subscriber that stopped reading fails after this
LOOPBACK_ORIGIN = re.compile(r"http://(localhost|127\.0\.0\.1)(:\d{1,5})?")


class LiveUnavailable(RuntimeError):
    """The live server cannot listen (its port is taken)."""


class LiveServer(Observer):
    """The live stream of one fill: binds 127.0.0.1:``port`` when made (LiveUnavailable if taken), serves
    from :meth:`start` (or ``with``) until :meth:`close`, and follows the fill as its :class:`Observer`.
    ``port`` 0 takes a free port (``.port`` says which). ``cache_wait``: seconds a fill with nothing to
    measure waits for a subscriber (default $POPCORN_LIVE_WAIT_S or :data:`CACHE_WAIT_S`)."""

    def __init__(self, port: int = DEFAULT_PORT, *, cache_wait: float | None = None,
                 keepalive_s: float = KEEPALIVE_S, linger_s: float = LINGER_S, queue_size: int = QUEUE_SIZE,
                 out=sys.stderr):
        try:
            self.httpd = _HTTPServer((HOST, port), _Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise LiveUnavailable(f"port {port} on {HOST} is in use (another fill's live stream?); "
                                      "choose another with --live PORT") from None
            raise LiveUnavailable(f"cannot listen on {HOST}:{port}: {e.strerror or e}; "
                                  "choose another port with --live PORT") from None
        self.port = self.httpd.server_address[1]
        self.httpd.live = self
        self.session = Session(HOST, self.port, queue_size)
        if cache_wait is None:
            cache_wait = live_wait_s(CACHE_WAIT_S)
        self.cache_wait = cache_wait
        self.keepalive_s, self.linger_s, self.out = keepalive_s, linger_s, out
        self.thread: threading.Thread | None = None
        self.closed = False

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> LiveServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="popcorn-live", daemon=True)
        self.thread.start()
        print(f"live: streaming this fill at {self.url}/v1/events (status: {self.url}/v1/status); the kernel "
              f"explorer's live page follows it on port {self.port}", file=self.out, flush=True)
        return self

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, kind, error, tb) -> None:
        self.close(error)

    # -- the fill's Observer ----------------------------------------------------------------------
    def planned(self, tasks, device: str, replay) -> None:
        from .tasks import Skip  # loaded by the fill already

        self.session.plan([(s.task.op, s.why) if isinstance(s, Skip) else (s.op, None) for s in tasks.steps],
                          device, replay)

    def __call__(self, task, row, summary) -> None:
        self.session.count(task.op, row)

    def finished(self, summary) -> None:
        if self.session.to_measure == 0 and not summary.interrupted and not self.session.subscribed.is_set():
            print(f"live: nothing to measure (add --force to remeasure cached cases); waiting up to "
                  f"{self.cache_wait:.0f} s for a subscriber at {self.url}", file=self.out, flush=True)
            try:
                self.session.subscribed.wait(self.cache_wait)
            except KeyboardInterrupt:  # Ctrl-C: the user will not wait; the fill itself is done
                pass
        self.session.complete(interrupted=summary.interrupted)

    # -- the end --------------------------------------------------------------------------------
    def close(self, error: BaseException | None = None) -> None:
        """Complete the session (``error``: why the fill stopped early), give subscribers a moment to read
        ``complete``, then stop listening and cut the connections left. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            if isinstance(error, KeyboardInterrupt):
                self.session.complete(interrupted=True)
            elif error is not None:
                self.session.complete(error=f"{type(error).__name__}: {error}")
            else:
                self.session.complete()
            self.httpd.drained.wait(self.linger_s)
        finally:
            self.session.end_streams()
            if self.thread is not None:
                self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd.cut_connections()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck subscriber never holds the process open
    live: LiveServer

    def server_bind(self) -> None:
        TCPServer.server_bind(self)  # HTTPServer's would look the host's name up in DNS: it can stall
        self.server_name, self.server_port = self.server_address[:2]
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.drained = threading.Event()  # no stream open
        self.drained.set()
        self.streams = 0

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that left is no error of ours
            super().handle_error(request, client_address)

    def stream(self, delta: int) -> None:
        with self.connections_lock:
            self.streams += delta
            self.drained.set() if self.streams == 0 else self.drained.clear()

    def cut_connections(self) -> None:
        with self.connections_lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = SERVICE
    timeout = SOCKET_TIMEOUT_S  # applied to the socket: a subscriber that stops reading is let go
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format, *args) -> None:
        pass  # the fill's progress line owns the terminal

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # any method but GET and OPTIONS (the server is read-only)
            return self.not_allowed
        raise AttributeError(name)

    # -- checks ---------------------------------------------------------------------------------
    def allowed(self) -> bool:
        """Whether the request names this server (Host) and comes from no page or a loopback one
        (Origin); else a 403 is sent. A rebinding page's requests carry its own host name."""
        port = self.server.live.port
        hosts = self.headers.get_all("Host") or []
        origin = self.headers.get("Origin")
        host_ok = len(hosts) == 1 and hosts[0].strip().lower() in (f"{HOST}:{port}", f"localhost:{port}")
        if host_ok and (origin is None or LOOPBACK_ORIGIN.fullmatch(origin)):
            return True
        self.reply(403, {"error": f"host or origin not allowed: requests must name {HOST}:{port} or "
                                  f"localhost:{port} and come from a loopback page"}, cors=False)
        return False

    def not_allowed(self) -> None:
        if self.allowed():
            self.reply(405, {"error": f"{self.command} is not allowed: this server is read-only (GET, OPTIONS)"},
                       extra={"Allow": "GET, OPTIONS"})

    # -- methods --------------------------------------------------------------------------------
    def do_GET(self) -> None:
        if not self.allowed():
            return
        url = urlsplit(self.path)
        if url.path == "/v1/status":
            self.reply(200, self.server.live.session.snapshot())
        elif url.path == "/v1/events":
            self.events(parse_qs(url.query).get("op", [None])[0])
        else:
            self.reply(404, {"error": f"no endpoint {url.path!r}: use /v1/status or /v1/events[?op=NAME]"})

    def do_OPTIONS(self) -> None:
        """The CORS preflight of a loopback page (and Private Network Access, where a browser asks)."""
        if not self.allowed():
            return
        self.send_response(204)
        self.cors()
        self.send_header("Allow", "GET, OPTIONS")
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Last-Event-ID, Cache-Control")
        self.send_header("Access-Control-Max-Age", "600")
        if self.headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def events(self, op: str | None) -> None:
        live = self.server.live
        try:
            after = int(self.headers.get("Last-Event-ID", "0"))
        except ValueError:
            after = 0
        self.server.stream(+1)
        try:
            session, replay, sub = live.session.subscribe(op, after)
            try:
                self.send_response(200)
                self.cors()
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-store")
                self.send_header("X-Accel-Buffering", "no")
                self.send_header("Connection", "close")  # the stream ends with the connection
                self.end_headers()
                self.close_connection = True
                self.wfile.write(session.frame() + b"".join(e.frame() for e in replay))
                while True:
                    try:
                        event = sub.queue.get(timeout=live.keepalive_s)
                    except queue.Empty:
                        self.wfile.write(b": keepalive\n\n")
                        continue
                    if event is None:  # dropped as too slow, or the server is closing
                        return
                    self.wfile.write(event.frame())
                    if event.kind == "complete":
                        return
            except OSError:  # the subscriber left or stopped reading
                self.close_connection = True
            finally:
                live.session.unsubscribe(sub)
        finally:
            self.server.stream(-1)

    # -- replies --------------------------------------------------------------------------------
    def cors(self) -> None:
        origin = self.headers.get("Origin")
        if origin is not None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Vary", "Origin")

    def reply(self, code: int, body: dict | str, cors: bool = True, extra: dict | None = None) -> None:
        data = (body if isinstance(body, str) else dumps(body)).encode()
        length = self.headers.get("Content-Length", "0")
        if length.isdigit() and 0 < int(length) <= 65536:
            self.rfile.read(int(length))  # a body left unread would reset the connection before our reply
        self.send_response(code)
        if cors:
            self.cors()
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True
