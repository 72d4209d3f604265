"""What the explorer keeps of a followed fill between reruns: its last status and the rows it streamed.

One :class:`Follow` per browser session (held in st.session_state by the pages): :meth:`poll`
asks the status, reads what the stream has sent since the last record seen, and starts afresh
when the fill's session changes (another fill on the same port).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import live_client

KEEP_PER_OP = 512  # rows kept per op, oldest dropped first


@dataclass
class Follow:
    port: int = live_client.DEFAULT_PORT
    status: dict | None = None  # the last status; None when nothing listened
    problem: str | None = None  # something other than a popcorn fill answers on the port
    session: str | None = None
    last_id: str | None = None
    rows: list = field(default_factory=list)  # record dicts, oldest first

    @property
    def running(self) -> bool:
        return bool(self.status) and self.status.get("state") == "running"

    def poll(self, port: int, read: bool = True, budget: float = 0.8) -> Follow:
        """Ask ``port`` for the status and, when ``read``, fetch the records streamed since the last."""
        if int(port) != self.port:
            self.__init__(port=int(port))
        try:
            self.status, self.problem = live_client.status(self.port), None
        except live_client.NotPopcorn as e:
            self.status, self.problem = None, str(e)
        if self.status is None:
            return self
        session = self.status.get("session")
        if session != self.session:  # a new fill on this port: its rows only
            self.session, self.last_id, self.rows = session, None, []
        if read:
            batch = live_client.read_events(self.port, self.last_id, budget=budget)
            seen = {r.get("_seq") for r in self.rows}
            for e in batch.events:
                if e.type in ("session", "progress", "complete") and isinstance(e.data, dict):
                    self.status = {**self.status, **e.data}
            for seq, row in batch.records():
                if seq is not None and seq in seen:
                    continue
                self.rows.append({**row, "_seq": seq})
            self.last_id = batch.last_id
            self._trim()
        return self

    def _trim(self) -> None:
        by_op: dict[str, int] = {}
        for r in reversed(self.rows):
            by_op[r.get("op")] = by_op.get(r.get("op"), 0) + 1
        extra = {op: n - KEEP_PER_OP for op, n in by_op.items() if n > KEEP_PER_OP}
        if not extra:
            return
        kept = []
        for r in self.rows:
            if extra.get(r.get("op"), 0) > 0:
                extra[r.get("op")] -= 1
                continue
            kept.append(r)
        self.rows = kept

    def rows_of(self, op: str) -> list[dict]:
        return [r for r in self.rows if r.get("op") == op]
