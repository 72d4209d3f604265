"""The user cache: one JSONL file of Records per op, safe across processes.

Location: ``$POPCORN_CACHE_DIR`` or ``$XDG_CACHE_HOME/popcorn`` (``~/.cache/popcorn``), then
``v<SCHEMA>/reports/<op>.jsonl``, so a schema change starts a fresh generation. Writers take
an ``flock`` on ``<op>.jsonl.lock``, read, upsert by record key with the merge rule, and
replace the file atomically; readers never see a half-written file. Bundled and published
reports are never written here.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from popcorn.core import events
from popcorn.core.jsonl import json_lines
from popcorn.core.paths import cache_dir

from .record import Record, prefer

log = logging.getLogger("popcorn.bench")


def path_for(op: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / f"{op}.jsonl"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read(op: str, root: Path | None = None, bad: list | None = None) -> list[Record]:
    """Every record cached for ``op`` (empty when none); unreadable lines as in :func:`read_file`."""
    path = path_for(op, root)
    if not path.exists():
        return []
    return read_file(path, bad)


class CorruptLine(ValueError):
    """A line of a record file that is no record; says which and how to go on."""


def read_file(path: Path, bad: list | None = None) -> list[Record]:
    """Records of one JSONL file (or a published Parquet snapshot). An unreadable line (bad bytes, bad
    JSON, a record of another schema) raises CorruptLine naming file and line, unless ``bad`` is a
    list: then ``(path, line number, why)`` is appended to it and the line is skipped."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        from .record import from_arrow

        return from_arrow(pq.read_table(path))
    rows = []
    for n, obj, why in json_lines(path):
        if obj is not None:
            try:
                rows.append(Record.from_dict(obj))
                continue
            except (ValueError, TypeError) as e:
                why = f"not a popcorn record: {e}"
        if bad is None:
            raise CorruptLine(f"{path}:{n}: {why[:200]}; `popcorn bench merge` skips such lines, "
                              "or move the file aside to rebuild it")
        bad.append((str(path), n, why[:200]))
    return rows


def jsonl_files(paths: list) -> list[Path]:
    """Record files named directly (JSONL or a published Parquet snapshot) or the JSONL files found
    (recursively) under named directories, sorted."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.rglob("*.jsonl"))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    return files


def merge(rows: list[Record], incoming: list[Record]) -> list[Record]:
    """Upsert ``incoming`` into ``rows`` by record key with the merge rule; sorted by key."""
    by_key = {r.key: r for r in rows}
    for r in incoming:
        old = by_key.get(r.key)
        if old is None or prefer(r, old):
            by_key[r.key] = r
    return sorted(by_key.values(), key=lambda r: tuple("" if v is None else str(v) for v in r.key))


def write(records: list[Record], root: Path | None = None) -> None:
    """Fold ``records`` into the cache files of their ops, under a lock, atomically."""
    by_op: dict[str, list[Record]] = {}
    for r in records:
        by_op.setdefault(r.op, []).append(r)
    for op, rows in by_op.items():
        path = path_for(op, root)
        with _locked(path):
            bad: list = []
            merged = merge(read_file(path, bad) if path.exists() else [], rows)
            if bad:  # the rewrite would drop them: keep the damaged file whole beside the cache
                kept = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
                shutil.copyfile(path, kept)
                log.warning("%s: %d unreadable line(s) (first: line %d, %s); the file was kept as %s and the "
                            "rest rewritten", path, len(bad), bad[0][1], bad[0][2], kept)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{op}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    f.writelines(r.to_json() + "\n" for r in merged)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
    for op in by_op:  # dispatch decides these ops' calls afresh
        events.evidence_changed(op)
