"""Where a fill's rows go: the user cache, a run's shard directory, or the Delta report store.

A sink takes batches of rows (``write``, durable when it returns), says which rows it already holds
for an op (``cached``, what planning skips) and where the worker's sentinels live (``sentinels``):
a crash row recovered from an orphaned sentinel belongs to the sink whose fill left it. Only
:class:`UserCacheSink` writes to the user cache.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import store
from .record import Record

WRITE_EVERY_S = 5.0


class Sink:
    """The interface the runner writes through; subclasses say where rows land."""

    sentinels: Path
    write_every_s = WRITE_EVERY_S  # how long the runner may hold measured rows before writing them

    def cached(self, op: str, bad: list) -> list[Record]:
        """The rows held for ``op``; unreadable lines are appended to ``bad`` as (path, line, why)."""
        raise NotImplementedError

    def write(self, rows: list[Record]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the sink holds open (nothing, for the sinks here)."""


class UserCacheSink(Sink):
    """The user cache (:mod:`popcorn.bench.store`), where dispatch and ``bench view --user`` look."""

    def __init__(self, sentinels: Path | None = None):
        self.sentinels = sentinels or store.cache_dir().parent / "fill"

    def cached(self, op: str, bad: list) -> list[Record]:
        return store.read(op, bad=bad)

    def write(self, rows: list[Record]) -> None:
        store.write(rows)


class ShardSink(Sink):
    """A run's shard directory: ``<directory>/<op>.jsonl``, one record per line, upserted like the user
    cache; ``popcorn bench merge DIRECTORY`` folds it into the report store."""

    def __init__(self, directory, sentinels: Path | None = None):
        self.directory = Path(directory)
        self.sentinels = sentinels or self.directory / ".sentinels"  # merge reads *.jsonl only

    def cached(self, op: str, bad: list) -> list[Record]:
        return store.read(op, root=self.directory, bad=bad)

    def write(self, rows: list[Record]) -> None:
        store.write(rows, root=self.directory)


class DeltaSink(Sink):
    """The Delta report store at ``uri`` (default ``$POPCORN_STORE``), merged with its merge rule."""

    write_every_s = 60.0  # each merge is a table version: fewer, larger ones

    def __init__(self, uri: str | None = None, sentinels: Path | None = None):
        from .delta import ReportStore

        self.store = ReportStore(uri)
        self.sentinels = sentinels or _sentinels_for(self.store.uri)

    def cached(self, op: str, bad: list) -> list[Record]:
        return self.store.read(op)

    def write(self, rows: list[Record]) -> None:
        self.store.merge(rows)


def _sentinels_for(uri: str) -> Path:
    """Beside a local table (as its creation lock is); under the user cache's root for a remote one."""
    from .damage import local_path

    root = local_path(uri)
    if root is not None:
        return root.parent / f".{root.name}.fill"
    return store.cache_dir().parent / "fill" / f"delta-{hashlib.sha1(uri.encode()).hexdigest()[:12]}"
