"""The report store: one Delta table of Records where every machine's rows meet.

Partitioned by op, upserted on the record key with the user cache's merge rule (a conclusive
row beats an inconclusive one; among equals the newer wins). deltalake is imported only here.
Merges are single-writer by nature in Delta (concurrent merges conflict even on disjoint
partitions), so a merge retries on commit conflicts. Reads filter in Python after a partition
prune: merges rewrite string columns as string_view, which pyarrow cannot compare.

Location: ``$POPCORN_STORE`` (a path or an object-store URI deltalake supports), default
``$XDG_DATA_HOME/popcorn/store`` (``~/.local/share/popcorn/store``).
"""

from __future__ import annotations

import fcntl
import random
import time

from popcorn.core.settings import settings
from popcorn.schema import CONCLUSIVE, KEY, SENTINEL_REASON

from . import damage
from .record import Record, arrow_schema, conform, from_arrow, to_arrow
from .store import merge as merge_rows

_CONCLUSIVE = "({a}.status IN (" + ", ".join(f"'{s}'" for s in sorted(CONCLUSIVE)) + "))"
# The merge rule as SQL: rank (conclusive, ts). Unlike the user cache, an exact tie keeps the
# stored row, so merging the same shard twice rewrites nothing.
_PREFER = (f"(CAST({_CONCLUSIVE.format(a='s')} AS INT) > CAST({_CONCLUSIVE.format(a='t')} AS INT)) OR "
           f"(CAST({_CONCLUSIVE.format(a='s')} AS INT) = CAST({_CONCLUSIVE.format(a='t')} AS INT) AND s.ts > t.ts)")
_MATCH = " AND ".join(f"(t.{k} IS NOT DISTINCT FROM s.{k})" for k in KEY)


def location() -> str:
    """The store: ``$POPCORN_STORE``, else ``$XDG_DATA_HOME/popcorn/store`` (``~/.local/share/popcorn/store``)."""
    return settings().store


class ReportStore:
    """The Delta table at ``uri`` (default :func:`location`)."""

    def __init__(self, uri: str | None = None):
        self.uri = uri or location()

    def exists(self) -> bool:
        """Whether a store is there, damaged or not (a damaged one must never be created over)."""
        root = damage.local_path(self.uri)
        if root is not None:
            return (root / "_delta_log").is_dir() or bool(damage.log_problems(root))
        from deltalake import DeltaTable

        return DeltaTable.is_deltatable(self.uri)

    def table(self, version: int | None = None):
        """The table at ``version`` (latest when None), after checking the store is whole (StoreDamaged)."""
        from deltalake import DeltaTable

        if not self.exists():
            raise FileNotFoundError(f"no report store at {self.uri}; create one with `popcorn bench merge FILES...` "
                                    "(or point POPCORN_STORE at an existing one)")
        latest = []

        def load():
            latest.append(DeltaTable(self.uri))
            return latest[-1]

        try:
            damage.check(self.uri, load)
        except damage.StoreDamaged:
            # a table another process is creating holds data files and no (or an empty) _delta_log until
            # its first commit lands: wait for its creation lock, then judge again
            root = damage.local_path(self.uri)
            if root is None:
                raise
            _await_creation(root)
            damage.check(self.uri, load)
        return latest[-1] if version is None else DeltaTable(self.uri, version=version)

    @property
    def version(self) -> int | None:
        return self.table().version() if self.exists() else None

    def history(self) -> list[dict]:
        return self.table().history()

    def read(self, op: str | None = None, version: int | None = None, **equals) -> list[Record]:
        """Records of ``op`` (all ops when None) at ``version`` (the latest when None) whose columns
        equal ``equals`` (e.g. ``status="pass"``); see :meth:`read_table`."""
        return from_arrow(self.read_table(op, version, **equals))

    def read_table(self, op: str | None = None, version: int | None = None, **equals):
        """The rows of :meth:`read` as an Arrow table of the canonical schema (what the explorer loads
        without building a Record per row). The partition prune happens in Delta; string filters run
        after casting string_view back to string, so they work after merges."""
        import pyarrow as pa

        if not self.exists():
            return arrow_schema().empty_table()
        from deltalake import QueryBuilder

        # Through DataFusion, not DeltaTable.to_pyarrow_table: that path runs the table's storage
        # handler on pyarrow's I/O threads, and about one process in six then aborts at exit
        # ("terminate called without an active exception", exit 134) after correct output.
        sql = "SELECT * FROM report" + (" WHERE op = '{}'".format(op.replace("'", "''")) if op else "")
        table = conform(pa.table(QueryBuilder().register("report", self.table(version)).execute(sql).read_all()))
        if equals:
            import pyarrow.compute as pc

            unknown = set(equals) - set(table.column_names)
            if unknown:
                raise ValueError(f"unknown columns {sorted(unknown)}; columns: {table.column_names}")
            mask = None
            for k, v in equals.items():
                m = pc.is_null(table[k]) if v is None else pc.equal(table[k], v)
                mask = m if mask is None else pc.and_(mask, m)
            table = table.filter(mask)
        return table

    def merge(self, records: list[Record], retries: int = 8) -> dict:
        """Upsert ``records`` with the merge rule; returns deltalake's metrics plus the new version."""
        from deltalake import write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        rows = merge_rows([], records)  # one row per key, the rule applied within the batch too
        if not rows:
            return {"num_source_rows": 0, "version": self.version}
        batch = to_arrow(rows)
        for attempt in range(retries + 1):
            try:
                if not self.exists() and self._create(batch):
                    return {"num_source_rows": len(rows), "num_target_rows_inserted": len(rows),
                            "version": self.version}
                # merge_schema: columns a newer popcorn adds (step_host_us) join a table written before them
                metrics = (self.table().merge(source=batch, predicate=_MATCH, source_alias="s", target_alias="t",
                                              merge_schema=True)
                           .when_matched_update_all(predicate=_PREFER).when_not_matched_insert_all().execute())
                return {**metrics, "version": self.version}
            except (CommitFailedError, DeltaError) as e:
                # a concurrent writer committed first (or created the table first): rerun the merge
                if attempt == retries or not _is_conflict(e):
                    raise
                time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))
        raise AssertionError("unreachable")

    def _create(self, batch) -> bool:
        """Create the table from ``batch``; False when another writer created it first (merge instead).

        Two writers creating one table at once would both append version 0's rows (every key twice):
        local stores serialize creation on a lock file beside the table, and mode="error" makes a
        creation that still races (object stores) fail as a conflict rather than append."""
        from deltalake import write_deltalake

        root = damage.local_path(self.uri)
        if root is None:
            write_deltalake(self.uri, batch, partition_by=["op"], mode="error")
            return True
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(_creation_lock(root), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self.exists():
                    return False
                write_deltalake(self.uri, batch, partition_by=["op"], mode="error")
                return True
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def scrub_incomplete(self) -> int:
        """Delete rows scheduled but never measured (the sentinel reason); returns how many."""
        if not self.exists():
            return 0
        metrics = self.table().delete(f"reason = '{SENTINEL_REASON}'")
        return int(metrics.get("num_deleted_rows", 0))

    def compact(self) -> None:
        """Rewrite small files (also makes string columns homogeneous again)."""
        self.table().optimize.compact()


def _creation_lock(root):
    return root.parent / f".{root.name}.create.lock"


def _await_creation(root) -> None:
    """Wait until no process holds the creation lock of the store at ``root`` (:meth:`ReportStore._create`)."""
    try:
        with open(_creation_lock(root)) as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:  # no lock file (never created by popcorn here) or not readable: nothing to wait for
        pass


def _is_conflict(e: Exception) -> bool:
    text = str(e).lower()
    return any(w in text for w in ("concurrent", "conflict", "already exists", "version", "commit"))
