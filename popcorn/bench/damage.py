"""Telling a damaged report store from a working one, and saying how to recover.

Damage that happens to files outside Delta's control (a truncated data file, a commit file
deleted from ``_delta_log``) makes deltalake raise parser and kernel errors, or, with the first
commit gone, can look like no table at all. Every store operation checks first and refuses to
read or write a damaged store, naming what is damaged and the ways out.
"""

from __future__ import annotations

import re
from pathlib import Path

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet$")


class StoreDamaged(RuntimeError):
    """The store at a URI is damaged; the message names the damage and the recovery."""


def recovery(uri: str) -> str:
    return (f"Nothing was written. To recover: move {uri} aside (popcorn never deletes it), then rebuild the "
            "store by merging what it was made of into a fresh one: the run shards and user caches "
            "(`popcorn bench merge DIR...`) and/or the last published snapshot "
            "(`popcorn bench merge popcorn/reports/report-vN.parquet`); a lost data file can also be restored "
            "from a backup of the store directory.")


def local_path(uri: str) -> Path | None:
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    return None if "://" in uri else Path(uri)


def log_problems(root: Path) -> list[str]:
    """Gaps in ``_delta_log``: commits missing after the latest checkpoint (or from version 0)."""
    log = root / "_delta_log"
    if not log.is_dir():
        if root.exists() and any(root.rglob("*.parquet")):
            return [f"{root} holds data files but no _delta_log"]
        return []
    names = [p.name for p in log.iterdir()]
    commits = sorted(int(m.group(1)) for n in names if (m := _COMMIT.match(n)))
    checkpoints = sorted(int(m.group(1)) for n in names if (m := _CHECKPOINT.match(n)))
    if not commits and not checkpoints:
        return [f"{log} holds no commit files"] if names else []
    start = checkpoints[-1] + 1 if checkpoints else 0
    last = max(commits + checkpoints)
    missing = sorted(set(range(start, last + 1)) - set(commits) - set(checkpoints))
    if missing:
        shown = ", ".join(f"{v:020d}.json" for v in missing[:5]) + (" ..." if len(missing) > 5 else "")
        return [f"commit file(s) missing from {log}: {shown}"]
    return []


def data_problems(root: Path, dt) -> list[str]:
    """Data files of the current version that are missing or not the size their commit recorded."""
    import pyarrow as pa

    problems = []
    for row in pa.table(dt.get_add_actions(flatten=True)).select(["path", "size_bytes"]).to_pylist():
        path = root / row["path"]
        if not path.exists():
            problems.append(f"data file {path} is missing")
        elif path.stat().st_size != row["size_bytes"]:
            problems.append(f"data file {path} is {path.stat().st_size} bytes, its commit says {row['size_bytes']} "
                            "(truncated or overwritten)")
    return problems


def check(uri: str, open_table) -> None:
    """Raise StoreDamaged when the store at ``uri`` is damaged. ``open_table()`` loads the latest version.
    Remote stores are checked as far as loading them goes."""
    root = local_path(uri)
    problems = log_problems(root) if root is not None else []
    dt = None
    if not problems:
        try:
            dt = open_table()
        except Exception as e:  # noqa: BLE001 - any load failure of an existing log is damage to report
            problems.append(f"the table does not load ({' '.join(str(e).split())[:300]})")
    if dt is not None and root is not None:
        problems += data_problems(root, dt)
    if problems:
        raise StoreDamaged(f"the report store at {uri} is damaged: " + "; ".join(problems[:5]) + ". "
                           + recovery(uri))
