"""``popcorn bench publish``: an immutable published report from the store.

A published report is a directory of snapshots, each stamped with the Delta version it came
from and never rewritten: ``report-v<N>.parquet`` (the current, conclusive rows) and
``dispatch-v<N>.json`` (the compiled dispatch table: per op, the evidence dispatch reads, in
plain JSON so a training process needs neither pyarrow nor deltalake), plus ``CURRENT``, which
names the version the runtime loads. The default directory is the bundled ``popcorn/reports``.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from popcorn.core import events
from popcorn.dispatch.table import BUNDLED
from popcorn.schema import CONCLUSIVE, DISPATCH_FIELDS, DISPATCH_VERSION, is_current_for

from .delta import ReportStore
from .record import Record, to_arrow


class PublishRefused(RuntimeError):
    pass


def current_rows(records: list[Record], ops: dict) -> list[Record]:
    """Conclusive rows measured against today's code of ops this install knows."""
    return [r for r in records if r.status in CONCLUSIVE and r.op in ops and is_current_for(r, ops[r.op])]


def dispatch_table(rows: list[Record], ops: dict, store_version: int, uri: str) -> dict:
    table = {"schema": DISPATCH_VERSION, "store_version": store_version, "store": uri,
             "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "rows": len(rows), "ops": {}}
    for r in sorted(rows, key=lambda r: (r.op, r.impl, r.case_id, r.grad, r.device)):
        entry = table["ops"].setdefault(r.op, {
            "ref_hash": ops[r.op].ref_hash,
            "impl_hash": {n: i.impl_hash for n, i in ops[r.op].implementations.items()},
            "rows": []})
        row = {k: getattr(r, k) for k in DISPATCH_FIELDS}
        row["config"] = json.loads(r.config)
        entry["rows"].append(row)
    return table


def _atomic_write(path: Path, data: bytes, exclusive: bool = False) -> None:
    """Write ``path`` whole or not at all. ``exclusive``: only if it does not exist yet (os.link never
    replaces), so of two writers exactly one succeeds; the other gets FileExistsError."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a published report is for every reader
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _taken(version: int, parquet: Path) -> str:
    return (f"store version {version} is published, or being published by another publisher ({parquet} exists); "
            f"published reports are immutable: merge new rows and publish the next store version "
            f"({version + 1} or later)")


def _point_current(out: Path, version: int) -> bool:
    """Make CURRENT name ``version`` unless a newer version was published meanwhile (under a lock);
    True when it does."""
    with open(out / ".CURRENT.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            now = (out / "CURRENT").read_text().strip() if (out / "CURRENT").exists() else ""
            if now.isdigit() and int(now) > version:
                return False
            _atomic_write(out / "CURRENT", f"{version}\n".encode())
            return True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def publish(store: ReportStore, ops: dict, out: Path = BUNDLED, *, force: bool = False,
            version: int | None = None, log=None) -> Path:
    """Write the snapshot of ``store`` (at ``version``, default latest) under ``out``; returns the JSON path.

    Refuses (PublishRefused) when ``popcorn bench check --release`` fails, unless ``force``.
    """
    import pyarrow.parquet as pq

    from .audit import run_check

    version = store.version if version is None else version
    records = store.read(version=version)
    report = io.StringIO()
    if run_check(records, ops, release=True, out=report) != 0 and not force:
        raise PublishRefused(f"the release check fails for store version {version}:\n{report.getvalue()}"
                             "fix it, or publish anyway with --force")
    rows = current_rows(records, ops)
    out.mkdir(parents=True, exist_ok=True)
    parquet, table_path = out / f"report-v{version}.parquet", out / f"dispatch-v{version}.json"
    if table_path.exists() or parquet.exists():
        raise PublishRefused(_taken(version, parquet))
    arrow = to_arrow(rows).replace_schema_metadata({"popcorn_store_version": str(version), "popcorn_store": store.uri})
    buf = io.BytesIO()
    pq.write_table(arrow, buf, compression="zstd")
    # The snapshot's file is the claim on the version: created exclusively, so of two publishers of one
    # version exactly one goes on; the other is told which version it can publish instead.
    try:
        _atomic_write(parquet, buf.getvalue(), exclusive=True)
    except FileExistsError:
        raise PublishRefused(_taken(version, parquet)) from None
    _atomic_write(table_path, json.dumps(dispatch_table(rows, ops, version, store.uri), sort_keys=True).encode(),
                  exclusive=True)
    pointed = _point_current(out, version)
    events.evidence_changed()  # calls in this process decide again on the new report
    if log:
        print(f"published store version {version}: {len(rows)} current rows of {len(records)} -> {table_path}"
              + ("" if pointed else "; CURRENT keeps naming a newer published version"), file=log)
    return table_path
