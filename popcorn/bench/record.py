"""Records: the result of measuring one implementation on one case, in one canonical schema.

The same flat dict is a JSONL line in the user cache, a row of the Parquet snapshot and of
the Delta table. Gauges and the case config are JSON text (their keys vary per op); timings
are typed columns so stores and the explorer can filter and sort on them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone

from popcorn.core.paths import SCHEMA

# Statuses. Conclusive ones say something about the implementation; the rest say why not.
PASS, FAIL, CRASH, OOM, TIMEOUT, SKIP, ERROR = "pass", "fail", "crash", "oom", "timeout", "skip", "error"
STATUSES = (PASS, FAIL, CRASH, OOM, TIMEOUT, SKIP, ERROR)
CONCLUSIVE = frozenset({PASS, FAIL, CRASH, OOM})
# The reason of a row for a case that was scheduled but never measured (its worker vanished
# with the whole fill); `popcorn bench merge --scrub-incomplete` removes these.
SENTINEL_REASON = "worker did not complete the case"

TIMING_FIELDS = (
    "fwd_ms", "fwd_q20_ms", "fwd_q80_ms", "bwd_ms", "bwd_q20_ms", "bwd_q80_ms",
    "step_ms", "step_q20_ms", "step_q80_ms", "host_us", "step_host_us", "fwd_mem_mb", "step_mem_mb",
    "ref_fwd_ms", "ref_bwd_ms", "ref_step_ms", "ref_fwd_mem_mb", "ref_step_mem_mb",
)


@dataclass
class Record:
    op: str
    impl: str
    case_id: str
    case: str  # human label of the case
    config: str  # JSON of Case.config()
    device: str
    torch: str
    backend_version: str | None
    ref_hash: str
    impl_hash: str
    status: str
    grad: bool
    reason: str | None = None
    reps: int = 0  # correctness trials completed
    fwd: str | None = None  # JSON {"out0": {"err", "budget", "scale"}, ...}
    bwd: str | None = None  # JSON {"<param>": {...}}
    timer: str | None = None  # "cuda-graph", "cuda-events" or "cpu"
    bench_error: str | None = None  # timing failed after a pass; the status stays pass
    fwd_ms: float | None = None
    fwd_q20_ms: float | None = None
    fwd_q80_ms: float | None = None
    bwd_ms: float | None = None
    bwd_q20_ms: float | None = None
    bwd_q80_ms: float | None = None
    step_ms: float | None = None  # forward + backward: what a training step pays
    step_q20_ms: float | None = None
    step_q80_ms: float | None = None
    host_us: float | None = None  # host wall time per forward call, without synchronizing
    step_host_us: float | None = None  # the same for forward + backward (gradient-mode rows)
    fwd_mem_mb: float | None = None  # peak allocated above the pre-call baseline
    step_mem_mb: float | None = None
    ref_fwd_ms: float | None = None  # the torch reference on the same case, for speedups
    ref_bwd_ms: float | None = None
    ref_step_ms: float | None = None
    ref_fwd_mem_mb: float | None = None
    ref_step_mem_mb: float | None = None
    ts: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    schema: int = SCHEMA

    # -- identity ---------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        return (self.op, self.impl, self.device, self.torch, self.backend_version, self.case_id, self.grad)

    @property
    def conclusive(self) -> bool:
        return self.status in CONCLUSIVE

    @property
    def benchmarked(self) -> bool:
        return self.fwd_ms is not None

    def current(self, ref_hash: str, impl_hash: str) -> bool:
        """Whether this row was measured against today's code; stale rows stay visible but decide nothing."""
        return self.ref_hash == ref_hash and self.impl_hash == impl_hash

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
        names = {f.name for f in fields(cls)}
        unknown = set(row) - names
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


def arrow_schema():
    """The canonical Arrow schema; types are explicit so all-null columns still concatenate."""
    import pyarrow as pa

    cols = []
    for f in fields(Record):
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
            raise TypeError(f"Record.{f.name}: no Arrow type for {t!r}")
    return pa.schema(cols)


def to_arrow(records: list[Record]):
    import pyarrow as pa

    schema = arrow_schema()
    return pa.Table.from_pylist([r.to_dict() for r in records], schema=schema)


def from_arrow(table) -> list[Record]:
    return [Record.from_dict(row) for row in table.to_pylist()]


def prefer(new: Record, old: Record) -> bool:
    """The merge rule: a conclusive row beats an inconclusive one; among equals the newer (ties: new) wins."""
    return (new.conclusive, new.ts) >= (old.conclusive, old.ts)
