"""report(): the text block that shows one result against the reference."""

from __future__ import annotations

import json

from popcorn.schema import PASS, REFERENCE

from .compare import Result
from .record import Record


def _speedup(ref: float | None, mine: float | None) -> str:
    return f"({ref / mine:.1f}x)" if ref and mine else "(n/a)"


def _ms(v: float | None, width: int) -> str:
    return f"{v:{width}.1f}" if v is not None else f"{'-':>{width}}"


def _gb(mb: float | None, width: int) -> str:
    return f"{mb / 1024:{width}.2f}" if mb is not None else f"{'-':>{width}}"


def format_block(label: str, mine: str, reference: str, status: str, reason: str | None, t: dict,
                 fwd_gauges: dict) -> str:
    if status != PASS:
        return f"{label:<8} {status}: {reason or 'no reason recorded'}"
    lines = [f"{label:<8} {reference} {_ms(t.get('ref_fwd_ms'), 8)} ms -> {mine} {_ms(t.get('fwd_ms'), 6)} ms   "
             f"{_speedup(t.get('ref_fwd_ms'), t.get('fwd_ms'))}"]
    ref_mem = t.get("ref_step_mem_mb") if t.get("ref_step_mem_mb") is not None else t.get("ref_fwd_mem_mb")
    mem = t.get("step_mem_mb") if t.get("step_mem_mb") is not None else t.get("fwd_mem_mb")
    if ref_mem is not None or mem is not None:
        lines.append(f"{'':<8} peak {_gb(ref_mem, 12)} GB -> {_gb(mem, 9)} GB")
    if t.get("bwd_ms") is not None:
        lines.append(f"{'':<8} bwd {_ms(t.get('ref_bwd_ms'), 13)} ms -> {_ms(t.get('bwd_ms'), 6)} ms   "
                     f"{_speedup(t.get('ref_bwd_ms'), t.get('bwd_ms'))}")
    gauge = fwd_gauges.get("out0")
    if gauge:
        lines.append(f"{'':<8} err {gauge['err']:.2e} on scale {gauge['scale']:.1f}")
    return "\n".join(lines)


def report(subject: Record | Result, label: str | None = None, *, mine: str | None = None,
           reference: str = REFERENCE, file=None) -> str:
    """Print and return the block for a Record (labelled by its impl) or a compare() Result."""
    if isinstance(subject, Record):
        label = label or subject.impl
        mine = mine or subject.impl
        timing = subject.result
        gauges = json.loads(subject.fwd) if subject.fwd else {}
        text = format_block(label, mine, reference, subject.status, subject.reason, timing, gauges)
    elif isinstance(subject, Result):
        label = label or mine or "mine"
        text = format_block(label, mine or "mine", reference, subject.status, subject.reason, subject.timing,
                            {k: g.as_dict() for k, g in subject.fwd.items()})
    else:
        raise TypeError(f"report() takes a Record or a compare() Result, got {type(subject).__name__}")
    print(text, file=file)
    return text
