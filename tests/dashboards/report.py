"""A small fixture report built from Records over the real ops' plans, with known matrix cells.

rms_norm: the first 6 points of its production normalized_shape bfloat16 curve and 4 of the
float32 one, plus 3 coverage samples. torch passes everywhere; compile passes at half the
reference's time (2.0x); liger passes but fails one case (some) and is the fastest on one case;
fla's rows are stale (another impl_hash). softmax: torch passes, compile fails everywhere (none).
One row of an op no longer registered ("gone").
"""

from __future__ import annotations

import json
from pathlib import Path

from popcorn.bench.plan import case_plan
from popcorn.bench.record import Record, to_arrow
from popcorn.kernels import OPS

from dashboards.curves import PLAN_BYTES

DEVICE = "NVIDIA H200"
BF16_CURVE = "curve:production:normalized_shape:bfloat16:base"
FP32_CURVE = "curve:production:normalized_shape:float32:base"

# The cells tests expect (the overview's table text).
EXPECTED = {
    ("rms_norm", "torch"): "✔",
    ("rms_norm", "compile"): "⚡ ✔ 2.0x / 2.0x",
    ("rms_norm", "fla"): "?",
    ("softmax", "torch"): "⚡ ✔",
    ("softmax", "compile"): "✘",
    ("attn", "torch"): "·",
    ("attn", "sdpa:flash"): "·",
    ("rms_norm", "sdpa:flash"): "",
}


def planned(op_name: str, curve: str | None, n: int):
    """The first ``n`` planned cases of a named curve (or of the coverage samples when None)."""
    plan = case_plan(OPS[op_name], PLAN_BYTES)
    by_id = {p.case.case_id: p for p in plan.cases}
    if curve is None:
        on_curves = {i for c in plan.curves for i in c.case_ids}
        return [p for p in plan.cases if p.case.case_id not in on_curves][:n]
    ids = next(c for c in plan.curves if c.name == curve).case_ids
    return [by_id[i] for i in ids[:n]]


def record(op_name: str, impl: str, p, status: str = "pass", time_ms: float | None = None,
           ref_ms: float = 1.0, stale: bool = False, device: str = DEVICE) -> Record:
    op = OPS[op_name]
    timed = status == "pass" and time_ms is not None
    gauges = json.dumps({"out0": {"err": 1e-3 if status == "pass" else 1.0, "budget": 1e-3, "scale": 2.0}})
    return Record(
        op=op_name, impl=impl, case_id=p.case.case_id, case=p.case.label, config=json.dumps(p.case.config()),
        device=device, torch="2.11.0+cu130", backend_version=None, ref_hash=op.ref_hash,
        impl_hash="0" * 12 if stale else op.implementations[impl].impl_hash, status=status, grad=p.grad,
        reason=None if status == "pass" else "err above the cutoff", reps=10, fwd=gauges, timer="cuda-graph",
        fwd_ms=time_ms if timed else None, fwd_q20_ms=time_ms * 0.95 if timed else None,
        fwd_q80_ms=time_ms * 1.05 if timed else None,
        step_ms=3 * time_ms if timed and p.grad else None, ref_fwd_ms=ref_ms if timed else None,
        ref_step_ms=3 * ref_ms if timed and p.grad else None, fwd_mem_mb=10.0 if timed else None,
        canary_us=1.29 if timed else None, ts="2026-12-01T00:00:00+00:00")


def rows() -> list[Record]:
    out = []
    bf16, fp32 = planned("rms_norm", BF16_CURVE, 6), planned("rms_norm", FP32_CURVE, 4)
    for k, p in enumerate(bf16 + fp32 + planned("rms_norm", None, 3)):
        ref = 0.01 * (k + 1) * (4 if p.case.dtype == "float32" else 1)
        out.append(record("rms_norm", "torch", p, time_ms=ref, ref_ms=ref))
        out.append(record("rms_norm", "compile", p, time_ms=ref / 2, ref_ms=ref))
        out.append(record("rms_norm", "fla", p, time_ms=ref / 3, ref_ms=ref, stale=True))
        if k == 0:  # the fastest of all on one case
            out.append(record("rms_norm", "liger", p, time_ms=ref / 4, ref_ms=ref))
        elif k == 1:
            out.append(record("rms_norm", "liger", p, status="fail"))
        else:
            out.append(record("rms_norm", "liger", p, time_ms=ref * 0.8, ref_ms=ref))
    for p in planned("softmax", None, 3):
        out.append(record("softmax", "torch", p, time_ms=0.02, ref_ms=0.02))
        out.append(record("softmax", "compile", p, status="fail"))
    gone = out[0].to_dict() | {"op": "gone", "case_id": "gone00000000"}
    out.append(Record.from_dict(gone))
    return out


def write_published(records: list[Record], out: Path, version: int = 1) -> Path:
    """A published report directory as ``popcorn bench publish`` lays it out."""
    import pyarrow.parquet as pq

    from popcorn.bench.publish import dispatch_table

    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(to_arrow(records), out / f"report-v{version}.parquet")
    known = [r for r in records if r.op in OPS]
    (out / f"dispatch-v{version}.json").write_text(json.dumps(dispatch_table(known, OPS, version, "fixture")))
    (out / "CURRENT").write_text(f"{version}\n")
    return out
