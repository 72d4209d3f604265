"""A client of ``popcorn bench fill --live`` (protocol 1, :mod:`popcorn.bench.live`): its status and
the records it streams.

The fill serves on 127.0.0.1:PORT (default 8765): ``GET /v1/status`` (JSON: service, protocol,
session, state, planned, done, measured, statuses, ops, ...) and ``GET /v1/events`` (Server-Sent
Events: ``session``, ``record`` (data: a record dict), ``progress``, ``complete``; comments starting
with ':' keep the connection alive; ``id:`` lines number records, and a reconnect with
``Last-Event-ID`` gets only later ones). A Streamlit rerun must not block, so every read has a
short socket timeout and a reading budget: the client takes what has arrived and returns.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from popcorn.bench.live import DEFAULT_PORT  # noqa: F401 - the pages' default
from popcorn.bench.live_session import PROTOCOL, SERVICE


@dataclass
class Event:
    type: str
    data: object  # parsed JSON when it parses, else the text
    id: str | None = None


@dataclass
class Batch:
    """What one read of the stream got."""

    events: list = field(default_factory=list)
    last_id: str | None = None
    complete: bool = False  # the stream said ``complete`` or closed

    def records(self) -> list[tuple[str | None, dict]]:
        """(id, record dict) of the record events, in order."""
        return [(e.id, row) for e in self.events if (row := record_of(e)) is not None]


def record_of(event: Event) -> dict | None:
    """The record an event carries (its data, or the data's ``record``), else None."""
    if event.type != "record" or not isinstance(event.data, dict):
        return None
    row = event.data.get("record", event.data)
    return row if isinstance(row, dict) else None


class NotPopcorn(RuntimeError):
    """Something answers on the port, but not a popcorn fill."""


def url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{int(port)}{path}"


def status(port: int, timeout: float = 0.5) -> dict | None:
    """The fill's status, or None when nothing listens on ``port`` (refused, timed out);
    NotPopcorn when something else answers."""
    req = urllib.request.Request(url(port, "/v1/status"), headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read(1 << 20)
    except urllib.error.HTTPError as e:
        raise NotPopcorn(f"port {port} answers HTTP {e.code} to /v1/status") from None
    except (urllib.error.URLError, OSError, TimeoutError):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        raise NotPopcorn(f"port {port} answers /v1/status with something other than JSON") from None
    if not isinstance(data, dict) or data.get("service") != SERVICE:
        raise NotPopcorn(f"port {port} answers /v1/status, but not as a popcorn fill")
    if data.get("protocol") != PROTOCOL:
        raise NotPopcorn(f"the fill on port {port} speaks live protocol {data.get('protocol')}, this explorer "
                         f"{PROTOCOL}: run the explorer of the popcorn that runs the fill")
    return data


def parse(lines) -> tuple[list[Event], bool]:
    """Server-Sent Events from text lines (without their newlines); also whether the last event
    was complete (a trailing event without its blank line is dropped: it may be half-read)."""
    events, kind, data, ident = [], None, [], None
    for line in lines:
        if line == "":
            if data or kind:
                text = "\n".join(data)
                try:
                    value = json.loads(text) if text else None
                except ValueError:
                    value = text
                events.append(Event(kind or "message", value, ident))
            kind, data, ident = None, [], None
            continue
        if line.startswith(":"):  # a keepalive comment
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            kind = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            ident = value
    return events, not (data or kind)


def read_events(port: int, last_id: str | None = None, budget: float = 0.8, timeout: float = 0.3,
                op: str | None = None, max_events: int = 5000) -> Batch:
    """Read ``/v1/events`` for at most about ``budget`` seconds (each read waits at most ``timeout``);
    ``last_id``: resume after that record. Returns what arrived; an empty, complete batch when
    nothing listens."""
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    path = "/v1/events" + (f"?op={urllib.request.quote(op)}" if op else "")
    batch = Batch(last_id=last_id)
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url(port, path), headers=headers), timeout=timeout)
    except (urllib.error.URLError, OSError, TimeoutError):
        batch.complete = True
        return batch
    lines: list[str] = []
    deadline = time.monotonic() + budget
    closed = False
    with resp:
        while time.monotonic() < deadline and len(lines) < max_events * 4:
            try:
                raw = resp.readline()
            except (TimeoutError, OSError):  # nothing more for now
                break
            if not raw:
                closed = True
                break
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            lines.append(line)
            if line == "" and any(x == "event: complete" or x == "event:complete" for x in lines[-4:]):
                closed = True
                break
    events, _ = parse(lines)
    batch.events = events[:max_events]
    for e in batch.events:
        if e.type == "record" and e.id is not None:
            batch.last_id = e.id
    batch.complete = closed or any(e.type == "complete" for e in batch.events)
    return batch
