"""Records: the result of measuring one implementation on one case, in one canonical schema.

The same flat dict is a JSONL line in the user cache, a row of the Parquet snapshot and of
the Delta table. Gauges and the case config are JSON text (their keys vary per op); timings
are typed columns so stores and the explorer can filter and sort on them. The columns, key,
statuses and currency rule are :mod:`popcorn.schema`'s; Record mirrors its fields (checked at
import) so rows keep a typed, keyword-constructed class.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone

# The status names are re-exported: the modules that build rows have always imported them from here.
from popcorn.schema import (CONCLUSIVE, CRASH, ERROR, FAIL, FIELDS, KEY, NAMES, OOM, PASS,  # noqa: F401
                            SENTINEL_REASON, SKIP, STATUSES, TIMEOUT, TIMING_FIELDS, VERSION, is_current, rank)


@dataclass
class Record:
    """One row; the fields are schema.FIELDS (their meaning is documented there), in order."""

    op: str
    impl: str
    case_id: str
    case: str
    config: str
    device: str
    torch: str
    backend_version: str | None
    ref_hash: str
    impl_hash: str
    status: str
    grad: bool
    reason: str | None = None
    reps: int = 0
    fwd: str | None = None
    bwd: str | None = None
    timer: str | None = None
    bench_error: str | None = None
    fwd_ms: float | None = None
    fwd_q20_ms: float | None = None
    fwd_q80_ms: float | None = None
    bwd_ms: float | None = None
    bwd_q20_ms: float | None = None
    bwd_q80_ms: float | None = None
    step_ms: float | None = None
    step_q20_ms: float | None = None
    step_q80_ms: float | None = None
    host_us: float | None = None
    step_host_us: float | None = None
    fwd_mem_mb: float | None = None
    step_mem_mb: float | None = None
    canary_us: float | None = None
    ref_fwd_ms: float | None = None
    ref_bwd_ms: float | None = None
    ref_step_ms: float | None = None
    ref_fwd_mem_mb: float | None = None
    ref_step_mem_mb: float | None = None
    ts: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    schema: int = VERSION

    # -- identity ---------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        return tuple(getattr(self, k) for k in KEY)

    @property
    def conclusive(self) -> bool:
        return self.status in CONCLUSIVE

    @property
    def benchmarked(self) -> bool:
        return self.fwd_ms is not None

    def current(self, ref_hash: str, impl_hash: str) -> bool:
        """Whether this row was measured against today's code; stale rows stay visible but decide nothing."""
        return is_current(self, ref_hash, impl_hash)

    @property
    def result(self) -> dict:
        """Raw status, gauges and measurements."""
        out = {"status": self.status, "reason": self.reason, "reps": self.reps, "grad": self.grad,
               "fwd": json.loads(self.fwd) if self.fwd else {}, "bwd": json.loads(self.bwd) if self.bwd else {},
               "timer": self.timer, "bench_error": self.bench_error}
        out.update({k: getattr(self, k) for k in TIMING_FIELDS})
        return out

    # -- serialization ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> Record:
        unknown = set(row).difference(NAMES)
        if unknown:
            raise ValueError(f"record has unknown columns {sorted(unknown)}; it may come from a newer popcorn")
        row = dict(row)
        for k in TIMING_FIELDS:  # Arrow may hand back NaN for nulls written by other tools
            if isinstance(row.get(k), float) and row[k] != row[k]:
                row[k] = None
        return cls(**row)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Record:
        return cls.from_dict(json.loads(line))


# Record mirrors the schema: a field added to one and not the other fails here, at import.
if [(f.name, f.type) for f in fields(Record)] != [(f.name, f.type) for f in FIELDS]:
    raise TypeError("popcorn.bench.record.Record and popcorn.schema.FIELDS disagree; change both together")


def arrow_schema():
    """The canonical Arrow schema; types are explicit so all-null columns still concatenate."""
    import pyarrow as pa

    cols = []
    for f in FIELDS:
        t = f.type
        if t in ("str", "str | None"):
            cols.append(pa.field(f.name, pa.string(), nullable=t != "str"))
        elif t == "bool":
            cols.append(pa.field(f.name, pa.bool_(), nullable=False))
        elif t == "int":
            cols.append(pa.field(f.name, pa.int32(), nullable=False))
        elif t == "float | None":
            cols.append(pa.field(f.name, pa.float64()))
        else:
            raise TypeError(f"schema field {f.name}: no Arrow type for {t!r}")
    return pa.schema(cols)


def conform(table):
    """``table`` in the canonical schema: a column a newer popcorn added reads as null in rows written before it
    (a store or a published snapshot), and the columns come in schema order."""
    import pyarrow as pa

    schema = arrow_schema()
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f.name, pa.nulls(len(table), f.type))
    return table.select(schema.names).cast(schema)


def to_arrow(records: list[Record]):
    import pyarrow as pa

    schema = arrow_schema()
    return pa.Table.from_pylist([r.to_dict() for r in records], schema=schema)


def from_arrow(table) -> list[Record]:
    return [Record.from_dict(row) for row in table.to_pylist()]


def prefer(new: Record, old: Record) -> bool:
    """The merge rule: a conclusive row beats an inconclusive one; among equals the newer (ties: new) wins."""
    return rank(new) >= rank(old)
