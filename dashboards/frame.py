"""Records as pandas frames: the whole report, and one op's rows with their case decoded.

:func:`records_frame` adds what every page filters on (whether a row is current, speedups);
:func:`op_frame` decodes one op's case configs (dtype, dims, batch, args, optional tensors), the
bytes the case must move and the forward error against its cutoff, once per op rather than per
row of the whole report.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from popcorn.bench.plan import BATCH
from popcorn.schema import CONCLUSIVE, KEY, PASS, REFERENCE


def fingerprints(ops: dict) -> tuple[dict, dict]:
    """(op -> ref_hash, (op, impl) -> impl_hash) of the code as registered now (each hash is computed
    once per process: cached properties of the op and implementation)."""
    return ({name: op.ref_hash for name, op in ops.items()},
            {(name, i): impl.impl_hash for name, op in ops.items() for i, impl in op.implementations.items()})


def records_frame(table, ops: dict) -> pd.DataFrame:
    """The rows of an Arrow table of the record schema, plus ``registered`` (op and impl known now),
    ``current`` (measured against today's code: schema.is_current, vectorized), ``speedup`` and
    ``step_speedup`` (the reference's time over this row's, for timed pass rows)."""
    df = table.to_pandas()
    if df.empty:
        for c in ("registered", "current"):
            df[c] = pd.Series(dtype=bool)
        for c in ("speedup", "step_speedup"):
            df[c] = pd.Series(dtype=float)
        return df
    ref, impl = fingerprints(ops)
    today = pd.DataFrame([(o, i, h) for (o, i), h in impl.items()], columns=["op", "impl", "_impl_hash"])
    today_impl = df[["op", "impl"]].merge(today, on=["op", "impl"], how="left")["_impl_hash"].to_numpy()
    df["registered"] = pd.notna(today_impl)
    df["current"] = df["registered"] & (df["ref_hash"] == df["op"].map(ref)) & (df["impl_hash"] == today_impl)
    passed = df["status"] == PASS
    # as view.speedup: pass rows where both times are there and nonzero
    df["speedup"] = (df["ref_fwd_ms"] / df["fwd_ms"]).where(passed & (df["fwd_ms"] > 0) & (df["ref_fwd_ms"] > 0))
    df["step_speedup"] = (df["ref_step_ms"] / df["step_ms"]).where(
        passed & (df["step_ms"] > 0) & (df["ref_step_ms"] > 0))
    return df


def merge_frames(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``new`` folded into ``old`` by record key with popcorn's merge rule (store.merge): a conclusive
    row beats an inconclusive one, then the newer wins, and on a tie the new one."""
    both = pd.concat([old.assign(_new=0), new.assign(_new=1)], ignore_index=True)
    both["_conclusive"] = both["status"].isin(CONCLUSIVE)
    both = both.sort_values(["_conclusive", "ts", "_new"], kind="stable")
    keyed = both.astype({k: object for k in KEY}).fillna({"backend_version": ""})
    keep = ~keyed.duplicated(list(KEY), keep="last")
    return both[keep].drop(columns=["_new", "_conclusive"]).sort_index().reset_index(drop=True)


# -- one op --------------------------------------------------------------------------------------

_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}  # outputs in the case dtype; ints 8


def case_columns(op, config: str) -> dict:
    """What one case config says, flattened: dtype, ``dim:<axis>`` per dim axis (``dim:...`` is
    the batch's product, its token rows), the batch, args and present optionals as canonical JSON,
    the minimal bytes the forward must move and its output elements."""
    from popcorn.core.case import Case

    c = json.loads(config)
    case = Case.from_config(c)
    out = {"dtype": c["dtype"], "batch": json.dumps(c["batch"]), "args": json.dumps(c["args"], sort_keys=True),
           "present": json.dumps(sorted(c["present"])), f"dim:{BATCH}": math.prod(c["batch"])}
    out.update({f"dim:{k}": v for k, v in c["dims"].items()})
    moved, elements = _traffic(op, case)
    out["bytes"], out["out_elements"] = moved, elements
    return out


def _traffic(op, case) -> tuple[float | None, float | None]:
    """Minimal forward traffic (each input read once, each output written once: perf-anchors'
    effective bandwidth) and the output elements; None where an annotation cannot be resolved."""
    from popcorn.bench.plan import estimated_bytes
    from popcorn.core.inputs import shape_of

    try:
        moved = estimated_bytes(op, case)
        elements = 0
        for spec in op.outputs:
            n = math.prod(shape_of(spec, case))
            elements += n
            moved += n * (_ITEMSIZE.get(case.dtype, 4) if spec.is_float else 8)
    except (KeyError, TypeError, ValueError):
        return None, None
    return float(moved), float(elements)


def error_ratio(gauges: str | None, dtype: str) -> float | None:
    """The worst ``err / cutoff`` over a row's gauges (JSON ``{name: {err, budget, scale}}``), with
    compare's cutoff ``max(2 * budget, floor(dtype) * scale)``; above 1 fails."""
    from popcorn.bench.compare import FLOORS
    from popcorn.core.inputs import dtype_of

    if not isinstance(gauges, str) or not gauges:  # null arrives as None or NaN
        return None
    floor = FLOORS.get(dtype_of(dtype), FLOORS[dtype_of("float32")])
    worst = None
    for g in json.loads(gauges).values():
        cutoff = max(2 * g.get("budget", 0.0), floor * g.get("scale", 1.0))
        err = g.get("err")
        if err is None or cutoff <= 0:
            continue
        r = err / cutoff if err == err else math.inf  # NaN error: off the chart, as compare rejects it
        worst = r if worst is None else max(worst, r)
    return worst


def op_frame(frame: pd.DataFrame, op) -> pd.DataFrame:
    """The rows of ``op`` with :func:`case_columns` (decoded once per distinct config), ``err_ratio``
    (forward gauges against their cutoff) and ``x``-ready ``dim:`` columns."""
    rows = frame[frame["op"] == op.name].copy()
    if rows.empty:
        return rows
    decoded = pd.DataFrame([case_columns(op, c) for c in rows["config"].unique()],
                           index=rows["config"].unique())
    rows = rows.join(decoded, on="config")
    rows["err_ratio"] = [error_ratio(g, d) for g, d in zip(rows["fwd"], rows["dtype"])]
    rows["bwd_err_ratio"] = [error_ratio(g, d) for g, d in zip(rows["bwd"], rows["dtype"])]
    fwd_s = rows["fwd_ms"] * 1e-3
    rows["bandwidth_gbs"] = rows["bytes"] / fwd_s / 1e9
    rows["throughput_gelems"] = rows["out_elements"] / fwd_s / 1e9
    return rows.reset_index(drop=True)


def backends(frame: pd.DataFrame) -> list[str]:
    """Backends in a frame, the reference first."""
    names = sorted(set(frame["impl"]))
    return ([REFERENCE] if REFERENCE in names else []) + [n for n in names if n != REFERENCE]


def rows_frame(rows: list[dict], ops: dict) -> pd.DataFrame:
    """A records frame of record dicts (streamed by a live fill); rows that are no record are left out."""
    from popcorn.bench.record import Record, to_arrow

    records = []
    for row in rows:
        try:
            records.append(Record.from_dict({k: v for k, v in row.items() if not k.startswith("_")}))
        except (TypeError, ValueError):
            continue
    return records_frame(to_arrow(records), ops)
