"""Where the explorer's rows come from: the published report, the Delta report store, the user cache.

Each source reads into an Arrow table of the canonical record schema through popcorn's read side
(no Record per row: a published report may hold 100K rows). :func:`token` is a cheap marker of
a source's content, so a cached frame is rebuilt when the source changes and not otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PUBLISHED, STORE, USER, PUBLISHED_USER = "published", "store", "user", "published+user"
LABELS = {
    PUBLISHED: "published report",
    STORE: "report store (Delta)",
    USER: "user cache",
    PUBLISHED_USER: "published + user cache",
}


@dataclass
class Loaded:
    """One source's rows (an Arrow table), where they came from, and lines that could not be read."""

    table: object  # pyarrow.Table of record.arrow_schema()
    where: str
    problems: list = field(default_factory=list)  # (path, line, why) of unreadable user-cache lines


def _user_files() -> list[Path]:
    from popcorn.core.paths import cache_dir

    root = cache_dir()
    return sorted(root.glob("*.jsonl")) if root.is_dir() else []


def where(source: str) -> str:
    """The location a source reads, in words."""
    from popcorn.bench.delta import location
    from popcorn.bench.view import published_path
    from popcorn.core.paths import cache_dir

    if source == PUBLISHED:
        return str(published_path() or "nothing published")
    if source == STORE:
        return location()
    if source == USER:
        return str(cache_dir())
    return f"{where(PUBLISHED)} + {where(USER)}"


def token(source: str) -> str:
    """Changes whenever the source's content may have: the published version, the store's Delta
    version, the user cache files' sizes and modification times."""
    if source == PUBLISHED:
        from popcorn.bench.view import published_path

        path = published_path()
        return f"{path}:{path.stat().st_mtime_ns}" if path and path.exists() else "none"
    if source == STORE:
        from popcorn.bench.delta import ReportStore

        store = ReportStore()
        return f"{store.uri}@{store.version}"
    if source == USER:
        return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in _user_files())
    return token(PUBLISHED) + "|" + token(USER)


def read(source: str) -> Loaded:
    """The rows of one basic source (PUBLISHED, STORE or USER); PUBLISHED_USER is a merge of two
    frames, done by :func:`dashboards.frame.merge_frames`."""
    from popcorn.bench.record import arrow_schema, to_arrow

    if source == PUBLISHED:
        from popcorn.bench.view import published_table

        table = published_table()
        return Loaded(arrow_schema().empty_table() if table is None else table, where(source))
    if source == STORE:
        from popcorn.bench.delta import ReportStore

        return Loaded(ReportStore().read_table(), where(source))
    if source == USER:
        from popcorn.bench.store import read_file

        bad: list = []
        rows = [r for path in _user_files() for r in read_file(path, bad)]
        return Loaded(to_arrow(rows), where(source), bad)
    raise ValueError(f"unknown source {source!r}; sources: {', '.join(LABELS)}")
