"""The sweep's shard directories: one per partition under the sweep's work directory, written by the
partition's fill (``bench fill --out``), seeded with the rows that spare it work, and merged into the
report store by ``report_store``.

Layout: ``<work>/reference/<case>/`` and ``<work>/measurements/<backend>/<case>/``, each holding
``<op>.jsonl`` (what ``popcorn bench merge DIR`` reads) and the fill's ``fill-summary.json``.
``<work>/merged.json`` remembers which shard files the store has taken in, so a merge reads only
files written since.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from popcorn.bench import store
from popcorn.bench.delta import ReportStore
from popcorn.bench.fill import SUMMARY_FILE
from popcorn.bench.record import Record

MERGED = "merged.json"


def reference_dir(root: Path, case: str) -> Path:
    return root / "reference" / case


def measurement_dir(root: Path, backend: str, case: str) -> Path:
    return root / "measurements" / backend / case


def seed(directory: Path, rows: list[Record]) -> int:
    """Fold ``rows`` into the shard directory (they spare the fill what they already measured); how many."""
    if rows:
        store.write(rows, root=directory)
    return len(rows)


def rows_in(directory: Path, op: str) -> list[Record]:
    """The op's rows in a shard directory (unreadable lines skipped: the fill names them)."""
    return store.read(op, root=directory, bad=[])


def forget_summary(directory: Path) -> None:
    """Remove the last fill's fill-summary.json, before the next fill writes its own."""
    (directory / SUMMARY_FILE).unlink(missing_ok=True)


def summary(directory: Path) -> dict | None:
    """The fill-summary.json of the fill that ran into ``directory``, or None (it ended before writing one)."""
    try:
        return json.loads((directory / SUMMARY_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None


def partition_rows(directory: Path, op: str, impls: set[str], fill_summary: dict | None) -> list[Record]:
    """The partition's rows: those of the pairs its fill planned (measured now or cached), of ``impls``;
    without a summary (the fill died early), every row of ``impls`` in the directory."""
    rows = [r for r in rows_in(directory, op) if r.impl in impls]
    if fill_summary is None:
        return rows
    planned = {(p[1], p[2], p[3]) for p in fill_summary.get("pairs", []) if p[0] == op}
    device = fill_summary.get("device")  # a shard seeded from the store holds rows of other devices too
    return [r for r in rows if (r.impl, r.case_id, r.grad) in planned and r.device == device]


@contextmanager
def _locked(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".merge.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def merge_new(root: Path, target: ReportStore) -> dict:
    """Merge the shard files under ``root`` written since the last merge into ``target`` (as ``popcorn
    bench merge`` does); returns the files, rows and the store's merge metrics."""
    with _locked(root):
        state_path = root / MERGED
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        files = store.jsonl_files([root]) if root.exists() else []
        fresh = {}
        for f in files:
            st = f.stat()
            stamp = [st.st_mtime_ns, st.st_size]
            if state.get(str(f)) != stamp:
                fresh[str(f)] = stamp
        bad: list = []
        # one row per record key (a reference row is in its partition's shard and its measurements'), by the merge rule
        rows = store.merge([], [r for f in fresh for r in store.read_file(Path(f), bad)])
        # shards are seeded from the store: rows it holds already (same key, same time) need no merge
        held = {(r.key, r.ts) for op in {r.op for r in rows} for r in target.read(op)}
        rows = [r for r in rows if (r.key, r.ts) not in held]
        metrics = target.merge(rows) if rows else {"num_source_rows": 0, "version": target.version}
        state.update(fresh)
        tmp = state_path.with_name(f".{MERGED}.{os.getpid()}")
        tmp.write_text(json.dumps(state, indent=0))
        os.replace(tmp, state_path)
    return {"files": sorted(fresh), "rows": rows, "skipped": bad, "metrics": metrics}
