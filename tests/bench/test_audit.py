"""bench check: missing/stale always block; the release gates block only with release."""

import io

import pytest

from popcorn.bench import audit as A
from popcorn.bench.audit import (CURVES, GATED, MISSING, NO_PASS, NO_TIMING, STALE, STATES, UNCLEAN,
                                 UNREGISTERED, UNSIZED, audit, memory_of, plan_for, run_check)
from popcorn.kernels import OPS as ALL_OPS

from .test_record import make


class WithOnly:
    """An op as seen with only some of its implementations registered: these tests audit torch and
    compile; library adapters' pairs are audited in test_release_lists_library_pairs_missing."""

    def __init__(self, op, keep):
        self._op, self.implementations = op, {k: v for k, v in op.implementations.items() if k in keep}

    def __getattr__(self, name):
        return getattr(self._op, name)

    def __getitem__(self, name):
        return self.implementations[name]


# library adapters left out; the other backends (attn's SDPA ones) kept
OPS = {name: WithOnly(op, [i for i, impl in op.implementations.items() if impl.backend.package is None])
       for name, op in ALL_OPS.items()}
OP = OPS["rms_norm"]
REF = OP.ref_hash
COMPILE = OP.implementations["compile"].impl_hash
TORCH = OP.implementations["torch"].impl_hash


def row(impl="compile", **kw):
    kw.setdefault("ref_hash", REF)
    kw.setdefault("impl_hash", COMPILE if impl == "compile" else TORCH)
    kw.setdefault("ref_fwd_ms", 1.0)
    return make(impl=impl, **kw)


def curve_rows(status="pass", points=2, skip_curve=None, **kw):
    """``points`` rows on every named curve of rms_norm's plan; ``skip_curve``'s rows are skips."""
    rows, seen = [], set()
    for curve in plan_for(OP).curves:
        for cid in curve.case_ids[:points]:
            if cid in seen:
                continue
            seen.add(cid)
            skip = curve.name == skip_curve
            rows.append(row(case_id=cid, status="skip" if skip else status,
                            fwd_ms=None if skip else kw.get("fwd_ms", 0.5), reason="gated" if skip else None))
    return rows


def kinds(findings, impl="compile"):
    return {f.kind for f in findings if f.impl == impl}


def check(records, release):
    out = io.StringIO()
    return run_check(records, OPS, release=release, out=out), out.getvalue()


def test_clean_release_passes():
    records = curve_rows() + [row(impl="torch")]
    assert audit(records, OPS, release=True) == []
    code, text = check(records, release=True)
    assert code == 0
    assert "records: 1/1 current fingerprints" in text and "passes: 1/1" in text and "timings: 1/1" in text
    assert "passed" in text and "popcorn bench fill" not in text


def test_stale_always_blocks_and_names_the_fix():
    records = [row(impl_hash="cccccccccccc"), row(ref_hash="dddddddddddd")]
    findings = audit(records, OPS, release=False)
    assert [(f.kind, f.blocking) for f in findings] == [(STALE, True)]
    code, text = check(records, release=False)
    assert code == 1
    assert "popcorn bench fill rms_norm --backend compile" in text
    assert "popcorn bench merge " in text and "records: 0/1 current fingerprints" in text
    assert kinds(audit(records + [row()], OPS, release=False)) == set()  # one current row clears it


def test_missing_only_with_release():
    records = [row(impl="torch")]
    assert audit(records, OPS, release=False) == []  # torch is the reference: never audited
    assert check(records, release=False)[0] == 0
    findings = audit(records, OPS, release=True)
    assert [(f.impl, f.kind, f.blocking) for f in findings] == [("compile", MISSING, True)]
    assert check(records, release=True)[0] == 1
    assert MISSING not in kinds(audit(curve_rows(), OPS, release=True))


def test_no_pass_warns_without_release_and_blocks_with_it():
    records = [row(status="fail", reason="out0: err", fwd_ms=None), row(case_id="x", status="oom", fwd_ms=None)]
    (f,) = audit(records, OPS, release=False)
    assert (f.kind, f.blocking) == (NO_PASS, False)
    assert "fail=1" in f.detail and "oom=1" in f.detail
    code, text = check(records, release=False)
    assert code == 0 and "warn" in text
    release = audit(records, OPS, release=True)
    assert NO_PASS in kinds(release) and all(f.blocking for f in release)
    assert check(records, release=True)[0] == 1
    assert NO_PASS not in kinds(audit(records + [row(case_id="y")], OPS, release=True))


def test_no_timing():
    untimed = curve_rows()
    for r in untimed:
        r.fwd_ms = None
    assert NO_TIMING in kinds(audit(untimed, OPS, release=True))
    assert NO_TIMING not in kinds(audit(untimed, OPS, release=False))  # a release gate only
    assert NO_TIMING not in kinds(audit(untimed + [row()], OPS, release=True))


def test_rows_timed_in_another_device_state_than_their_reference_are_noted_never_blocking():
    ref = [row(impl="torch", case_id=c, canary_us=1.47) for c in ("a", "b", "c")]
    like = [row(case_id="a", canary_us=1.45), row(case_id="b", canary_us=1.50)]
    assert STATES not in kinds(audit(ref + like, OPS, release=False))
    apart = like + [row(case_id="c", canary_us=1.29, case="the tiny one")]
    (f,) = [f for f in audit(ref + apart, OPS, release=True) if f.kind == STATES]
    assert not f.blocking and f.impl == "compile"
    assert "1 of 3 timed row(s)" in f.detail and "0.88x" in f.detail and "the tiny one" in f.detail
    # rows without a canary (CPU timers, rows from before it) or beside a reference without one say nothing
    assert STATES not in kinds(audit(ref + [row(case_id="c")], OPS, release=False))
    assert STATES not in kinds(audit([row(impl="torch", case_id="c")] + apart[2:], OPS, release=False))
    # nor does the reference of another device
    assert STATES not in kinds(audit(ref + [row(case_id="c", canary_us=1.29, device="NVIDIA H100 80GB HBM3")], OPS,
                                     release=False))


def test_curves_need_two_timed_points_and_skips_are_gated():
    one = curve_rows(points=1)
    (f,) = [f for f in audit(one, OPS, release=True) if f.kind == CURVES]
    assert f.blocking and "curve:production:" in f.detail and "(1/" in f.detail
    assert CURVES not in kinds(audit(one, OPS, release=False))
    assert CURVES not in kinds(audit(curve_rows(points=2), OPS, release=True))
    # a curve whose attempted points are all skips counts as gated, not missing
    name = plan_for(OP).curves[0].name
    gated = curve_rows(skip_curve=name)
    assert CURVES not in kinds(audit(gated, OPS, release=True))
    code, text = check(gated, release=True)
    assert code == 0 and "gated" in text
    # stale rows do not count as points
    first = set(plan_for(OP).curves[0].case_ids)
    stale = [row(case_id=r.case_id, impl_hash="cccccccccccc") if r.case_id in first else r for r in curve_rows()]
    (f,) = [f for f in audit(stale, OPS, release=True) if f.kind == CURVES]
    assert name in f.detail


def pair_rows(op, impl, curves, grad=True, points=2):
    """Timed pass rows of ``impl`` on the first ``points`` points of ``curves``."""
    ids = sorted({cid for c in curves for cid in c.case_ids[:points]})
    return [make(op=op.name, impl=impl, case_id=cid, grad=grad, ref_hash=op.ref_hash,
                 impl_hash=op.implementations[impl].impl_hash, ref_fwd_ms=1.0) for cid in ids]


def test_curves_a_static_gate_refuses_are_gated():
    attn = OPS["attn"]
    curves = plan_for(attn).curves
    half = [c for c in curves if c.dtype != "float32"]
    assert half and len(half) < len(curves)  # sdpa:cudnn's gates refuse the float32 ones
    a = A.check(pair_rows(attn, "sdpa:cudnn", half), {"attn": WithOnly(attn, ["torch", "sdpa:cudnn"])},
                release=True)
    assert a.passed and a.tally.curves == len(half) and a.tally.curves_gated == len(curves) - len(half)
    # the same rows claimed by a backend that admits float32 leave its float32 curves short
    b = A.check([make(**{**r.__dict__, "impl": "sdpa:math", "impl_hash": attn["sdpa:math"].impl_hash})
                 for r in pair_rows(attn, "sdpa:cudnn", half)], {"attn": WithOnly(attn, ["torch", "sdpa:math"])},
                release=True)
    assert b.failing == {("attn", "sdpa:math"): [CURVES]}


def test_a_pair_without_rows_is_gated_when_every_measured_case_is_gated_for_it():
    attn = OPS["attn"]
    fp32 = [c for c in plan_for(attn).curves if c.dtype == "float32"]
    ops = {"attn": WithOnly(attn, ["torch", "sdpa:cudnn", "sdpa:math"])}
    findings = audit(pair_rows(attn, "torch", fp32), ops, release=True)
    by_impl = {f.impl: f for f in findings}
    assert (by_impl["sdpa:cudnn"].kind, by_impl["sdpa:cudnn"].blocking) == (GATED, False)
    assert "gate" in by_impl["sdpa:cudnn"].detail
    assert (by_impl["sdpa:math"].kind, by_impl["sdpa:math"].blocking) == (MISSING, True)
    # one measured case it can run (a bfloat16 one) makes it missing
    bf16 = [c for c in plan_for(attn).curves if c.dtype == "bfloat16"][:1]
    more = audit(pair_rows(attn, "torch", fp32) + pair_rows(attn, "torch", bf16, points=1), ops, release=True)
    assert {f.impl: f.kind for f in more}["sdpa:cudnn"] == MISSING


def test_a_forward_only_backend_answers_gradient_curves_with_forward_rows():
    lse = ALL_OPS["logsumexp"]
    assert lse["fla"].forward_only
    ops = {"logsumexp": WithOnly(lse, ["torch", "fla"])}
    curves = plan_for(lse).curves
    assert curves and all(p.grad for p in plan_for(lse).cases)  # every planned case wants gradients
    reference = pair_rows(lse, "torch", curves)
    # it can run every measured case (forward only), so no rows is missing, not gated
    assert [(f.impl, f.kind) for f in audit(reference, ops, release=True)] == [("fla", MISSING)]
    forward = pair_rows(lse, "fla", curves, grad=False)
    a = A.check(reference + forward, ops, release=True)
    assert a.passed and a.tally.curves == len(curves) and not a.tally.curves_gated


@pytest.mark.parametrize("bad", [dict(status="fail", fwd_ms=None), dict(status="crash", fwd_ms=None),
                                 dict(status="error", fwd_ms=None), dict(bench_error="cuda graph capture")])
def test_unclean(bad):
    records = curve_rows() + [row(case_id="zzzzzzzzzzzz", **bad)]
    (f,) = audit(records, OPS, release=True)
    assert (f.kind, f.blocking) == (UNCLEAN, True)
    assert UNCLEAN not in kinds(audit(records, OPS, release=False))
    code, text = check(records, release=True)
    assert code == 1 and "--force" in text
    # unclean stale rows are history, not evidence
    old = curve_rows() + [row(case_id="zzzzzzzzzzzz", impl_hash="cccccccccccc", **bad)]
    assert audit(old, OPS, release=True) == []


def test_unregistered_rows_are_noted_not_blocking():
    records = [row(), make(op="no_such_op"), row(impl="liger", impl_hash="x")]
    findings = audit(records, OPS, release=False)
    assert {(f.op, f.impl, f.kind) for f in findings} == {("no_such_op", "*", UNREGISTERED),
                                                          ("rms_norm", "liger", UNREGISTERED)}
    assert not any(f.blocking for f in findings)
    assert check(records, release=False)[0] == 0


def test_no_records_fails():
    code, text = check([], release=False)
    assert code == 1 and "no records" in text


def test_check_returns_data_and_the_text_is_its_formatting():
    records = [row(impl_hash="cccccccccccc"), row(impl="torch"), make(op="no_such_op")]
    a = A.check(records, OPS, release=False)
    assert (a.records, a.release, a.passed) == (3, False, False)
    assert [(f.kind, f.blocking) for f in a.findings] == [(UNREGISTERED, False), (STALE, True)]
    assert a.failing == {("rms_norm", "compile"): [STALE]}
    assert (a.tally.pairs, a.tally.current) == (1, 0)
    out = io.StringIO()
    assert run_check(records, OPS, release=False, out=out) == 1
    assert out.getvalue() == A.format_check(a, OPS) + "\n"
    assert A.check([], OPS, release=True).passed is False


@pytest.mark.parametrize("name, gib", [("NVIDIA H200", 141), ("NVIDIA H100 80GB HBM3", 80), ("NVIDIA H100 NVL", 94),
                                       ("NVIDIA A100-SXM4-80GB", 80), ("NVIDIA A100-PCIE-40GB", 40),
                                       ("NVIDIA GH200 480GB", None), ("Tesla V100-SXM2-16GB", None)])
def test_memory_of_known_devices(name, gib):
    assert memory_of(name) == (gib * 10**9 if gib else None)


def softmax_rows(device, device_bytes, points=2):
    op = OPS["softmax"]
    ids = {cid for c in plan_for(op, device_bytes).curves for cid in c.case_ids[:points]}
    return [make(op="softmax", impl="compile", case_id=cid, device=device, ref_hash=op.ref_hash,
                 impl_hash=op["compile"].impl_hash, ref_fwd_ms=1.0) for cid in sorted(ids)]


def test_the_curves_follow_the_records_device():
    from popcorn.bench.fill import CPU_BUDGET_BYTES

    small = plan_for(OPS["softmax"], CPU_BUDGET_BYTES).curves
    assert len(small) < len(plan_for(OPS["softmax"], A.H200_BYTES).curves)  # so the device matters below
    cpu = A.check(softmax_rows("cpu:x86_64", CPU_BUDGET_BYTES), OPS, release=True)
    assert cpu.passed and cpu.tally.curves + cpu.tally.curves_gated == len(small)
    # the same rows claimed by an H200 miss the curves only its memory plans
    (f,) = audit(softmax_rows("NVIDIA H200", CPU_BUDGET_BYTES), OPS, release=True)
    assert f.kind == CURVES and f.blocking
    forty = 40 * 10**9
    assert A.check(softmax_rows("NVIDIA A100-SXM4-40GB", forty), OPS, release=True).passed
    # an explicit budget overrides the device's
    assert A.check(softmax_rows("cpu:x86_64", CPU_BUDGET_BYTES), OPS, release=True,
                   device_bytes=A.H200_BYTES).failing == {("softmax", "compile"): [CURVES]}


def test_unknown_device_skips_the_curves_with_a_note():
    rows = softmax_rows("Tesla V100-SXM2-16GB", A.H200_BYTES, points=1)
    (f,) = audit(rows, OPS, release=True)
    assert (f.kind, f.blocking) == (UNSIZED, False) and "Tesla V100-SXM2-16GB" in f.detail
    assert A.check(rows, OPS, release=True).passed
    assert audit(rows, OPS, release=False) == []  # curves are a release gate only
    # with a known device beside it, that device's plan applies to the pooled rows
    known = rows + [make(op="softmax", impl="compile", case_id="x", device="NVIDIA H200", ref_hash=rows[0].ref_hash,
                         impl_hash=rows[0].impl_hash)]
    assert {f.kind for f in audit(known, OPS, release=True)} == {CURVES}


def test_release_lists_library_pairs_missing():
    libraries = [i for i in ALL_OPS["rms_norm"].implementations if i not in ("torch", "compile")]
    assert libraries, "rms_norm has library adapters"
    findings = audit(curve_rows() + [row(impl="torch")], ALL_OPS, release=True)
    assert {(f.impl, f.kind) for f in findings} == {(lib, MISSING) for lib in libraries}
    code, text = run_check(curve_rows() + [row(impl="torch")], ALL_OPS, release=True, out=io.StringIO()), None
    assert code == 1
