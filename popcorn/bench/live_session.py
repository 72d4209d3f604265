"""What the live fill stream serves (:mod:`popcorn.bench.live`): one fill's counts, its record events
kept for replay, and the subscribers' queues. Counting and publishing share one lock, so a new
subscriber's replay ends exactly where its queue begins, and publishing never waits on a subscriber.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import uuid
from collections import deque
from datetime import datetime, timezone
from typing import NamedTuple

from popcorn import __version__
from popcorn.schema import STATUSES

SERVICE = "popcorn-live"
PROTOCOL = 1
QUEUE_SIZE = 1024  # events a subscriber may fall behind by before it is dropped
REPLAY_PER_OP = 2048  # record events kept per op for a reconnecting subscriber


class StreamEvent(NamedTuple):
    kind: str  # session, record, progress or complete
    data: str  # JSON
    id: int | None = None  # record events only: what Last-Event-ID names
    op: str | None = None  # the op a record or progress event is about (the ?op= filter)

    def frame(self) -> bytes:
        head = f"id: {self.id}\n" if self.id is not None else ""
        return f"{head}event: {self.kind}\ndata: {self.data}\n\n".encode()


class Subscriber:
    def __init__(self, op: str | None, size: int):
        self.op = op
        self.queue: queue.Queue[StreamEvent | None] = queue.Queue(size)  # None: the stream ends here

    def wants(self, event: StreamEvent) -> bool:
        return self.op is None or event.op is None or event.op == self.op


class Session:
    """What the stream serves: the fill's counts, the record events kept for replay and the subscribers.
    Counting and publishing happen under one lock, so a new subscriber's replay and queue meet exactly."""

    def __init__(self, host: str, port: int, queue_size: int = QUEUE_SIZE, replay_per_op: int = REPLAY_PER_OP):
        self.id, self.host, self.port = uuid.uuid4().hex, host, port
        self.queue_size, self.replay_per_op = queue_size, replay_per_op
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.lock = threading.Lock()
        self.state, self.error, self.interrupted, self.device = "running", None, False, None
        self.to_measure: int | None = None  # None until the plan is known
        self.ops: dict[str, dict] = {}  # op -> {"planned": n, "statuses": {status or why skipped: n}}
        self.seq = 0
        self.kept: dict[str, deque[StreamEvent]] = {}  # op -> its latest record events
        self.subscribers: set[Subscriber] = set()
        self.subscribed = threading.Event()  # someone has opened /v1/events
        self.completion: StreamEvent | None = None
        self.dropped = 0

    # -- counting (the fill's side) -------------------------------------------------------------
    def plan(self, pairs: list[tuple[str, str | None]], device: str, replay) -> None:
        """The planned pairs as (op, why skipped or None), in plan order; ``replay``: rows to stream first."""
        with self.lock:
            self.device, self.to_measure = device, 0
            for name, why in pairs:
                op = self.ops.setdefault(name, {"planned": 0, "statuses": {}})
                op["planned"] += 1
                if why is None:
                    self.to_measure += 1
                else:
                    op["statuses"][why] = op["statuses"].get(why, 0) + 1
            for row in replay:
                self.record(row)
            self.publish(StreamEvent("progress", self.status_json()))

    def count(self, op: str, row) -> None:
        with self.lock:
            statuses = self.ops.setdefault(op, {"planned": 0, "statuses": {}})["statuses"]
            what = "pruned" if row is None else row.status
            statuses[what] = statuses.get(what, 0) + 1
            if row is not None:
                self.record(row)
            self.publish(StreamEvent("progress", self.status_json(), op=op))

    def complete(self, interrupted: bool = False, error: str | None = None) -> None:
        with self.lock:
            if self.completion is not None:
                return
            self.state, self.interrupted, self.error = "complete", self.interrupted or interrupted, error
            self.completion = StreamEvent("complete", self.status_json())
            self.publish(self.completion)
            self.subscribers.clear()  # each has ``complete`` queued, or was dropped

    def record(self, row) -> None:  # under the lock
        self.seq += 1
        event = StreamEvent("record", dumps(row.to_dict()), self.seq, row.op)
        self.kept.setdefault(row.op, deque(maxlen=self.replay_per_op)).append(event)
        self.publish(event)

    def publish(self, event: StreamEvent) -> None:  # under the lock
        for sub in [s for s in self.subscribers if s.wants(event)]:
            try:
                sub.queue.put_nowait(event)
            except queue.Full:  # too slow: drop it rather than hold the fill
                self.subscribers.discard(sub)
                self.dropped += 1
                _end(sub)

    # -- serving (the handlers' side) -----------------------------------------------------------
    def status(self) -> dict:  # under the lock
        ops = {name: {"planned": c["planned"], "done": sum(c["statuses"].values()), "statuses": dict(c["statuses"])}
               for name, c in self.ops.items()}
        statuses: dict = {}
        for c in ops.values():
            for k, v in c["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
        return {"service": SERVICE, "protocol": PROTOCOL, "version": __version__, "session": self.id,
                "command": "fill", "state": self.state, "started_at": self.started_at, "host": self.host,
                "port": self.port, "device": self.device, "planned": sum(c["planned"] for c in ops.values()),
                "done": sum(c["done"] for c in ops.values()), "to_measure": self.to_measure,
                "measured": sum(v for k, v in statuses.items() if k in STATUSES), "statuses": statuses,
                "ops": ops, "interrupted": self.interrupted, "error": self.error}

    def status_json(self) -> str:  # under the lock
        return dumps(self.status())

    def snapshot(self) -> str:
        with self.lock:
            return self.status_json()

    def subscribe(self, op: str | None, after: int) -> tuple[StreamEvent, list[StreamEvent], Subscriber]:
        """The ``session`` event, the kept record events after ``after`` and a queue of what follows
        (``complete`` already in it when the fill has ended)."""
        sub = Subscriber(op, self.queue_size)
        with self.lock:
            kept = self.kept.get(op, ()) if op is not None else [e for q in self.kept.values() for e in q]
            replay = sorted((e for e in kept if e.id > after), key=lambda e: e.id)
            if self.completion is not None:
                sub.queue.put_nowait(self.completion)
            else:
                self.subscribers.add(sub)
            self.subscribed.set()
            return StreamEvent("session", self.status_json()), replay, sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self.lock:
            self.subscribers.discard(sub)

    def end_streams(self) -> None:
        with self.lock:
            for sub in self.subscribers:
                _end(sub)
            self.subscribers.clear()


def _end(sub: Subscriber) -> None:
    """Make ``sub``'s stream end at its next event, making room in a full queue (only the lock holder puts)."""
    try:
        sub.queue.put_nowait(None)
    except queue.Full:
        try:
            sub.queue.get_nowait()
        except queue.Empty:
            pass
        sub.queue.put_nowait(None)


def dumps(obj) -> str:
    """JSON a browser parses: NaN and infinities (JSON has neither) become null."""
    try:
        return json.dumps(obj, allow_nan=False, separators=(",", ":"))
    except ValueError:
        def finite(v):
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: finite(x) for k, x in v.items()}
            return [finite(x) for x in v] if isinstance(v, (list, tuple)) else v
        return json.dumps(finite(obj), separators=(",", ":"))
