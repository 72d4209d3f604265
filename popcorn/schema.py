"""The record schema: what one measurement row is, in one place, with the standard library alone.

A record is the result of measuring one implementation on one case. The same flat row is a JSONL
line in the user cache, a row of the Delta table and of the Parquet snapshot, and (a subset of
its columns) a row of the published dispatch table. Everything that reads or writes rows (the
Record dataclass, the stores, dispatch, the audit, the view, the Dagster assets and Streamlit
pages) takes from here the columns and their types, the record key, the statuses, the reference's
timing columns and the currency rule.

This module imports nothing outside the standard library, so it can be loaded by a process
without torch (``importlib`` by file path: ``import popcorn.schema`` also runs ``popcorn/__init__``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

VERSION = 1  # the record schema generation; a new one starts a fresh user-cache directory
REFERENCE = "torch"  # the implementation every other is measured against: the op's own reference


# -- statuses ----------------------------------------------------------------------------------

PASS, FAIL, CRASH, OOM, TIMEOUT, SKIP, ERROR = "pass", "fail", "crash", "oom", "timeout", "skip", "error"
STATUSES = (PASS, FAIL, CRASH, OOM, TIMEOUT, SKIP, ERROR)
# Conclusive rows say something about the implementation (the merge keeps them over the rest);
# timeout, skip and error say why nothing was learnt.
CONCLUSIVE = frozenset({PASS, FAIL, CRASH, OOM})
# Correctness verdicts: what dispatch's validity regions and holes are made of.
JUDGED = frozenset({PASS, FAIL, CRASH})
FAILED = frozenset({FAIL, CRASH})
# A fill keeps these until the code changes; an error (the harness broke, not the kernel) is measured again.
REUSABLE = frozenset(STATUSES) - {ERROR}
# Canaries (``canary_us``) further apart than this, relatively, were timed in different device states.
STATES_APART = 0.05
MIN_CURVE_POINTS = 2  # timed pass points a named curve needs in a release (fewer do not make a curve)
# The reason of a row for a case that was scheduled but never measured (its worker vanished with the
# whole fill); `popcorn bench merge --scrub-incomplete` removes these.
SENTINEL_REASON = "worker did not complete the case"


# -- columns -----------------------------------------------------------------------------------

class Field(NamedTuple):
    name: str
    type: str  # "str", "str | None", "bool", "int" or "float | None" (the Arrow types follow from these)
    doc: str


FIELDS = (
    Field("op", "str", "the op's registered name"),
    Field("impl", "str", f"the implementation (backend) measured; {REFERENCE!r} is the reference"),
    Field("case_id", "str", "stable hash of the case: dims, batch, dtype, scalar args, present optionals"),
    Field("case", "str", "human label of the case"),
    Field("config", "str", "JSON of Case.config() (dims, batch, dtype, args, present)"),
    Field("device", "str", "torch.cuda.get_device_name (e.g. 'NVIDIA H200'), or cpu:<machine>"),
    Field("torch", "str", "torch version"),
    Field("backend_version", "str | None", "the backend package's version; null for torch-only backends"),
    Field("ref_hash", "str", "fingerprint of the reference's code when measured"),
    Field("impl_hash", "str", "fingerprint of the implementation's code when measured"),
    Field("status", "str", "one of STATUSES"),
    Field("grad", "bool", "measured in gradient mode (forward and backward)"),
    Field("reason", "str | None", "why the status is not pass"),
    Field("reps", "int", "correctness trials completed"),
    Field("fwd", "str | None", 'JSON {"out0": {"err", "budget", "scale"}, ...}'),
    Field("bwd", "str | None", 'JSON {"<param>": {"err", "budget", "scale"}, ...}'),
    Field("timer", "str | None", '"cuda-graph", "cuda-events" or "cpu"'),
    Field("bench_error", "str | None", "timing failed after a pass; the status stays pass"),
    Field("fwd_ms", "float | None", "forward device time, median"),
    Field("fwd_q20_ms", "float | None", "forward device time, 20th percentile"),
    Field("fwd_q80_ms", "float | None", "forward device time, 80th percentile"),
    Field("bwd_ms", "float | None", "backward device time, median (cuda-graph: step replays less the "
          "forward replays beside them)"),
    Field("bwd_q20_ms", "float | None", "backward device time, 20th percentile"),
    Field("bwd_q80_ms", "float | None", "backward device time, 80th percentile"),
    Field("step_ms", "float | None", "forward + backward: what a training step pays"),
    Field("step_q20_ms", "float | None", "step device time, 20th percentile"),
    Field("step_q80_ms", "float | None", "step device time, 80th percentile"),
    Field("host_us", "float | None", "host wall time per forward call, without synchronizing"),
    Field("step_host_us", "float | None", "the same for forward + backward (gradient-mode rows)"),
    Field("fwd_mem_mb", "float | None", "peak allocated above the pre-call baseline, forward"),
    Field("step_mem_mb", "float | None", "the same for forward + backward"),
    Field("canary_us", "float | None", "a fixed tiny graph-replayed call (a 4096x64 fp16 mul) timed just before "
          "the samples, us per call: the device state they were taken in (an H100 has two, 12% apart)"),
    Field("ref_fwd_ms", "float | None", "the reference's fwd_ms on the same case, for speedups"),
    Field("ref_bwd_ms", "float | None", "the reference's bwd_ms on the same case"),
    Field("ref_step_ms", "float | None", "the reference's step_ms on the same case"),
    Field("ref_fwd_mem_mb", "float | None", "the reference's fwd_mem_mb on the same case"),
    Field("ref_step_mem_mb", "float | None", "the reference's step_mem_mb on the same case"),
    Field("ts", "str", "when it was measured, ISO 8601 UTC"),
    Field("schema", "int", "the schema VERSION it was written with"),
)
NAMES = tuple(f.name for f in FIELDS)
TYPES = {f.name: f.type for f in FIELDS}

# The provenance key: one row per key in every store; a newer measurement of the same key replaces it.
KEY = ("op", "impl", "device", "torch", "backend_version", "case_id", "grad")
KEY_IN_OP = KEY[1:]  # the key among one op's rows (published dispatch rows do not repeat the op)

# Measurements: typed float columns (stores and the explorer filter and sort on them).
TIMING_FIELDS = tuple(f.name for f in FIELDS if f.type == "float | None")
# What the reference's own run of a case contributes beside every other row of that case: ``ref_<k>``.
REFERENCE_TIMED = ("fwd_ms", "bwd_ms", "step_ms", "fwd_mem_mb", "step_mem_mb")
FORWARD_TIMED = ("fwd_ms", "fwd_mem_mb")  # what a forward-mode row takes from a gradient-mode reference row
REFERENCE_FIELDS = tuple(f"ref_{k}" for k in REFERENCE_TIMED)

# The published dispatch table: per op, its fingerprints once and these columns per row, in plain JSON.
DISPATCH_VERSION = 1
DISPATCH_FIELDS = ("impl", "case_id", "config", "grad", "device", "torch", "backend_version", "status", "reason",
                   "fwd_ms", "bwd_ms", "step_ms", "host_us", "step_host_us", "fwd_mem_mb", "step_mem_mb",
                   "ref_fwd_ms", "ref_bwd_ms", "ref_step_ms")

assert set(KEY) <= set(NAMES) and set(REFERENCE_FIELDS) <= set(TIMING_FIELDS) and set(DISPATCH_FIELDS) <= set(NAMES)


# -- rules -------------------------------------------------------------------------------------

def column(row, name: str):
    """Column ``name`` of ``row``: a mapping (a JSON or Arrow row) or an object (a Record)."""
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def is_current(row, ref_hash: str | None, impl_hash: str | None) -> bool:
    """Whether ``row`` was measured against the code that runs now: both of its fingerprints equal
    today's (``ref_hash`` of the op, ``impl_hash`` of its implementation; None: not registered).
    Stale rows stay visible as history but are evidence for nothing."""
    return (ref_hash is not None and impl_hash is not None
            and column(row, "ref_hash") == ref_hash and column(row, "impl_hash") == impl_hash)


def is_current_for(row, op) -> bool:
    """:func:`is_current` against ``op`` as registered now (anything with ``ref_hash`` and
    ``implementations``, a mapping of names to objects with ``impl_hash``); False for a row of an
    implementation the op no longer registers."""
    impl = op.implementations.get(column(row, "impl"))
    return impl is not None and is_current(row, op.ref_hash, impl.impl_hash)


def why_stale(rows: Iterable, ref_hash: str | None, impl_hash: str | None) -> str:
    """Which fingerprint moved on, for rows none of which is current."""
    rows = list(rows)
    which = []
    if not any(column(r, "ref_hash") == ref_hash for r in rows):
        which.append("reference")
    if not any(column(r, "impl_hash") == impl_hash for r in rows):
        which.append("implementation")
    return " and ".join(which) + " changed" if which else "no row matches both fingerprints"


def rank(row) -> tuple:
    """The merge rule as an order: a conclusive row beats an inconclusive one, then the newer wins."""
    return column(row, "status") in CONCLUSIVE, column(row, "ts") or ""
