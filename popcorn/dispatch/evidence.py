"""The evidence dispatch reads: the published dispatch table plus this machine's user cache.

Rows are normalized to small dicts, loaded lazily per op (first undecided call), with json
alone: no pyarrow, no deltalake. User-cache rows win over published ones with the same key
when newer; rows measured against other code (fingerprints) are dropped here.
"""

from __future__ import annotations

import json
import warnings

from popcorn.core.jsonl import json_lines
from popcorn.core.paths import cache_dir
from popcorn.schema import KEY_IN_OP, is_current_for

from .table import load

_TABLE = None
_ROWS: dict[str, tuple] = {}  # op -> (user cache mtime, rows)
_WARNED: set[tuple[str, int]] = set()  # (file, line) already reported


def table():
    global _TABLE
    if _TABLE is None:
        _TABLE = load()
    return _TABLE


def reset() -> None:
    """Forget everything loaded (a new report was published, or the environment changed)."""
    global _TABLE
    _TABLE = None
    _ROWS.clear()


def forget(op_name: str) -> None:
    """Reload ``op_name``'s rows on its next undecided call (new evidence arrived)."""
    _ROWS.pop(op_name, None)


def _normalize(row: dict) -> dict:
    config = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"])
    return {**row, "config": config, "dims": config["dims"], "batch": tuple(config["batch"]),
            "dtype": config["dtype"], "args": config["args"], "present": tuple(sorted(config["present"]))}


def read_rows(op, path) -> list[dict]:
    """The rows of a record file (JSON lines) measured against the current code of ``op``, normalized.

    Dispatch never fails because of evidence: a line that cannot be read (bad bytes, bad JSON, a
    record of another schema) is skipped with one warning naming the file and line."""
    rows = []
    try:
        lines = list(json_lines(path))
    except OSError as e:
        _warn_once(path, 0, f"unreadable ({e})")
        return rows
    for n, r, why in lines:
        if r is None:
            _warn_once(path, n, why)
            continue
        if is_current_for(r, op):
            try:
                rows.append(_normalize(r))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                _warn_once(path, n, f"not a popcorn record ({type(e).__name__}: {e})")
    return rows


def _warn_once(path, line: int, why: str) -> None:
    if (str(path), line) not in _WARNED:
        _WARNED.add((str(path), line))
        warnings.warn(f"popcorn: skipped {path}:{line} of the user cache, {why}; dispatch runs without it "
                      "(`popcorn bench merge` names every such line)", RuntimeWarning, stacklevel=2)


def rows_for(op) -> list[dict]:
    """Current rows for ``op``: published ones whose fingerprints still match, then the user cache's."""
    path = cache_dir() / f"{op.name}.jsonl"
    mtime = path.stat().st_mtime_ns if path.exists() else None
    cached = _ROWS.get(op.name)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    published = table().ops.get(op.name, {})
    ref_hash, hashes = published.get("ref_hash"), published.get("impl_hash", {})
    rows = {}
    for r in published.get("rows", []):
        # a published row's fingerprints are stored once per op and implementation, not per row
        if is_current_for({"impl": r["impl"], "ref_hash": ref_hash, "impl_hash": hashes.get(r["impl"])}, op):
            n = _normalize(r)
            rows[tuple(n.get(k) for k in KEY_IN_OP)] = n
    if mtime is not None:
        for n in read_rows(op, path):
            k = tuple(n.get(x) for x in KEY_IN_OP)
            old = rows.get(k)
            if old is None or n.get("ts", "") >= old.get("ts", ""):
                rows[k] = n
    result = list(rows.values())
    _ROWS[op.name] = (mtime, result)
    return result


