"""The live fill stream over real HTTP on CPU: status, Server-Sent Events, replay, filters, the request
checks, the server's lifetime and a subscriber that never reads.

Every wait here is on an event or a stream's end, with generous timeouts: a loaded 2-core machine
makes a toy fill take seconds, not milliseconds.
"""

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from popcorn.bench import live as live_module
from popcorn.bench import store
from popcorn.bench.fill import fill
from popcorn.bench.live import LiveServer
from popcorn.bench.record import Record

from . import fill_ops
from .fill_ops import SLICE

WAIT_S = 300  # a stream or a fill that takes longer than this is stuck, not slow


def fill_toy(live, backend="toy:good", **kw):
    """Two cases of the toy slice, reference and ``backend``: four pairs."""
    kw.setdefault("limit", 2)
    kw.setdefault("out", io.StringIO())
    return fill([fill_ops.toy_scale], backends=[backend], slice_spec=SLICE, device="cpu", trials=1,
                observer=live, **kw)


def server(**kw) -> LiveServer:
    return LiveServer(0, out=io.StringIO(), **kw)


def request(port, method="GET", path="/v1/status", headers=None, body=None):
    """(status, headers, body) of one request; ``headers`` may replace Host."""
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def status(port) -> dict:
    code, _, body = request(port)
    assert code == 200
    return json.loads(body)


class Stream:
    """A /v1/events subscriber reading in a thread: ``events`` as (kind, id, data), ``opened`` once the
    session event arrived, ``ended`` when the server closed the stream."""

    def __init__(self, port, path="/v1/events", headers=None):
        self.events, self.keepalives = [], 0
        self.opened, self.ended = threading.Event(), threading.Event()
        self.code = None
        self.thread = threading.Thread(target=self.read, args=(port, path, headers or {}), daemon=True)
        self.thread.start()

    def read(self, port, path, headers):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        try:
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            self.code = r.status
            kind, id_, data = None, None, None
            for raw in r:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    self.keepalives += 1
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("id: "):
                    id_ = int(line[4:])
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                elif not line and kind is not None:
                    self.events.append((kind, id_, data))
                    if kind == "session":
                        self.opened.set()
                    kind, id_, data = None, None, None
        finally:
            conn.close()
            self.opened.set()
            self.ended.set()

    def wait(self):
        assert self.ended.wait(WAIT_S), "the stream did not end"
        return self.events

    def kinds(self):
        return [k for k, _, _ in self.events]

    def records(self):
        return [(i, d) for k, i, d in self.events if k == "record"]


def test_status_names_the_service_session_device_and_counts(toy_cache):
    with server() as live:
        before = status(live.port)
        assert before["service"] == "popcorn-live" and before["protocol"] == live_module.PROTOCOL
        assert uuid.UUID(before["session"]).hex == before["session"] and before["state"] == "running"
        summary = fill_toy(live)
        code, headers, body = request(live.port)
        after = json.loads(body)
    assert code == 200 and headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    assert after["session"] == before["session"] and after["state"] == "complete"
    assert after["device"] == summary.device and after["device"].startswith("cpu")
    assert after["planned"] == after["done"] == after["measured"] == after["to_measure"] == summary.measured == 4
    assert after["statuses"] == {"pass": 4}
    assert after["ops"] == {"toy_scale": {"planned": 4, "done": 4, "statuses": {"pass": 4}}}


def test_the_stream_carries_session_records_progress_and_complete(toy_cache):
    with server() as live:
        stream = Stream(live.port)
        assert stream.opened.wait(WAIT_S)  # subscribed before the first case
        summary = fill_toy(live)
        events = stream.wait()
    kinds = stream.kinds()
    assert kinds[0] == "session" and events[0][2]["state"] == "running"
    assert kinds[-1] == "complete" and events[-1][2]["state"] == "complete" and events[-1][2]["measured"] == 4
    assert "progress" in kinds and all(i is None for k, i, _ in events if k != "record")
    records = stream.records()
    assert [i for i, _ in records] == list(range(1, summary.measured + 1))  # increasing integer ids
    rows = [Record.from_dict(d) for _, d in records]  # each is the dict a Record serialises to
    written = {(r.impl, r.case_id, r.grad): r.to_dict() for r in store.read("toy_scale")}
    assert {(r.impl, r.case_id, r.grad): r.to_dict() for r in rows} == written


def test_a_reconnecting_subscriber_gets_only_the_records_after_its_last_event_id(toy_cache):
    with server() as live:
        fill_toy(live)
        every = Stream(live.port)
        later = Stream(live.port, headers={"Last-Event-ID": "2"})
        every.wait(), later.wait()
    assert [i for i, _ in every.records()] == [1, 2, 3, 4]
    assert [i for i, _ in later.records()] == [3, 4]
    assert later.kinds() == ["session", "record", "record", "complete"]


def test_op_filters_the_records(toy_cache):
    with server() as live:
        fill([fill_ops.toy_scale, fill_ops.toy_counted], backends=["toy:good", "toy:one"], limit=1, device="cpu",
             trials=1, observer=live, out=io.StringIO())
        scale, counted = Stream(live.port, "/v1/events?op=toy_scale"), Stream(live.port, "/v1/events?op=toy_counted")
        every = Stream(live.port)
        scale.wait(), counted.wait(), every.wait()
    assert {d["op"] for _, d in scale.records()} == {"toy_scale"} and len(scale.records()) == 2
    assert {d["op"] for _, d in counted.records()} == {"toy_counted"} and len(counted.records()) == 2
    assert len(every.records()) == 4


def plain_fill(live=None):
    """The toy op's plan (no slice) sampled to one case: two pairs."""
    return fill([fill_ops.toy_scale], backends=["toy:good"], limit=1, device="cpu", trials=1, observer=live,
                out=io.StringIO())


def test_a_plain_fill_streams_only_what_it_measures(toy_cache):
    plain_fill()
    with server(cache_wait=0) as live:
        summary = plain_fill(live)
        stream = Stream(live.port)
        stream.wait()
    assert summary.measured == 0 and stream.records() == [] and stream.kinds() == ["session", "complete"]
    assert stream.events[-1][2]["statuses"] == {"cached": 2}


def test_a_slice_streams_its_cached_rows_and_an_all_cached_fill_waits_for_a_subscriber(toy_cache):
    fill_toy(None)  # the cache now holds the slice's four pairs
    with server(cache_wait=WAIT_S * 2) as live:
        done = []
        filler = threading.Thread(target=lambda: done.append(fill_toy(live)), daemon=True)
        filler.start()
        while status(live.port)["to_measure"] is None:  # until the plan is known
            assert filler.is_alive()
            time.sleep(0.05)
        assert filler.is_alive()  # nothing to measure: it waits for a subscriber (for up to 600 s)
        stream = Stream(live.port)
        filler.join(WAIT_S)
        assert not filler.is_alive() and done[0].measured == 0
        stream.wait()
    assert stream.kinds()[0] == "session" and stream.kinds()[-1] == "complete"
    assert len(stream.records()) == 4 and stream.events[-1][2]["statuses"] == {"cached": 4}
    assert {(d["impl"], d["case_id"]) for _, d in stream.records()} == {
        (r.impl, r.case_id) for r in store.read("toy_scale")}


def test_foreign_origins_and_rebinding_hosts_are_refused(toy_cache):
    with server() as live:
        port = live.port
        assert request(port, headers={"Origin": "http://evil.example"})[0] == 403
        assert request(port, path="/v1/events", headers={"Origin": "http://evil.example"})[0] == 403
        assert request(port, headers={"Host": f"evil.example:{port}"})[0] == 403
        assert request(port, headers={"Host": f"127.0.0.1:{port + 1}"})[0] == 403
        assert request(port, headers={"Origin": "null"})[0] == 403
        code, headers, _ = request(port, headers={"Host": f"localhost:{port}", "Origin": "http://localhost:8501"})
        assert code == 200 and headers["access-control-allow-origin"] == "http://localhost:8501"
        code, headers, _ = request(port, "OPTIONS", headers={
            "Origin": "http://127.0.0.1:3000", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Private-Network": "true"})
        assert code == 204 and headers["access-control-allow-private-network"] == "true"
        assert "GET" in headers["access-control-allow-methods"]
        assert request(port, "OPTIONS", headers={"Origin": "http://evil.example"})[0] == 403
        assert not live.session.subscribed.is_set()  # the refused stream never subscribed


def test_the_server_is_read_only(toy_cache):
    with server() as live:
        code, headers, _ = request(live.port, "POST", "/v1/events", body=b'{"x": 1}')
        assert code == 405 and headers["allow"] == "GET, OPTIONS"
        assert request(live.port, "DELETE")[0] == 405
        assert request(live.port, "PUT", body=b"x")[0] == 405
        assert request(live.port, path="/v1/nothing")[0] == 404


def test_the_server_is_gone_once_the_fill_returns_even_after_an_error(toy_cache):
    with server() as live:
        stream = Stream(live.port)
        assert stream.opened.wait(WAIT_S)
        fill_toy(live)
    assert stream.wait()[-1][0] == "complete"
    with pytest.raises(ConnectionRefusedError):
        request(live.port)

    with pytest.raises(RuntimeError, match="the fill broke"):
        with server() as broken:
            stream = Stream(broken.port)
            assert stream.opened.wait(WAIT_S)
            raise RuntimeError("the fill broke")
    kind, _, final = stream.wait()[-1]
    assert kind == "complete" and final["error"] == "RuntimeError: the fill broke"
    with pytest.raises(ConnectionRefusedError):
        request(broken.port)


def test_a_drained_fill_completes_its_stream_and_closes_the_server(toy_cache, monkeypatch):
    from popcorn.bench.fill import drain_on_sigterm

    from .test_fill import TerminateAfter

    monkeypatch.setenv("TOY_SLOW_S", "0.01")
    with drain_on_sigterm() as terminated:
        with server() as live:
            stream = Stream(live.port)
            assert stream.opened.wait(WAIT_S)
            summary = fill_toy(live, "toy:slow", limit=8, out=TerminateAfter(at=4))
    assert terminated and summary.interrupted
    kind, _, final = stream.wait()[-1]
    assert kind == "complete" and final["interrupted"] and final["measured"] == summary.measured
    assert len(stream.records()) == summary.measured
    with pytest.raises(ConnectionRefusedError):
        request(live.port)


def test_a_subscriber_that_never_reads_is_dropped_and_holds_neither_the_fill_nor_the_end(toy_cache, monkeypatch):
    monkeypatch.setattr(live_module._Handler, "timeout", 3600)  # only a drop or the close may free it
    live = server(queue_size=2, linger_s=1).start()
    try:
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # a full socket a few events in
        stalled.connect(("127.0.0.1", live.port))
        stalled.sendall(f"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1:{live.port}\r\n\r\n".encode())
        assert live.session.subscribed.wait(WAIT_S)
        with live.httpd.connections_lock:
            for conn in live.httpd.connections:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)
        summary = fill_toy(live, limit=6)
        assert summary.measured == 12 and live.session.dropped == 1
    finally:
        closer = threading.Thread(target=live.close, daemon=True)
        closer.start()
        closer.join(WAIT_S)
    assert not closer.is_alive()
    stalled.close()


def test_cli_parses_live_with_an_optional_port(capsys):
    from popcorn.cli import _parser

    parse = _parser().parse_args
    assert parse(["bench", "fill", "rms_norm"]).live is None
    assert parse(["bench", "fill", "rms_norm", "--live"]).live == 8765
    assert parse(["bench", "fill", "rms_norm", "--live", "9000"]).live == 9000
    with pytest.raises(SystemExit):
        parse(["bench", "fill", "--live", "rms_norm"])
    assert "name the ops before --live" in capsys.readouterr().err


def cli(*args, cache, **kw):
    return subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", *args], capture_output=True,
                          text=True, timeout=WAIT_S, env={**os.environ, "POPCORN_CACHE_DIR": str(cache)}, **kw)


def test_cli_live_streams_the_fill_and_a_taken_port_fails_before_measuring(toy_cache):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    out = cli("tests.bench.fill_ops:toy_scale", "--backend", "toy:good", "--device", "cpu", "--live", str(port),
              cache=toy_cache / "cache")
    assert out.returncode == 2
    assert f"port {port}" in out.stderr and "--live PORT" in out.stderr
    assert "toy_scale:" not in out.stderr and store.read("toy_scale") == []  # nothing planned or measured

    taken.close()  # now free: the fill serves on it
    out = cli("tests.bench.fill_ops:toy_scale", "--backend", "toy:good", "--device", "cpu", "--trials", "1",
              "--limit", "1", "--slice", *SLICE, "--live", str(port), cache=toy_cache / "cache")
    assert out.returncode == 0, out.stderr
    assert f"http://127.0.0.1:{port}/v1/events" in out.stderr
    assert len(store.read("toy_scale")) == 2
    with pytest.raises(ConnectionRefusedError):
        request(port)
