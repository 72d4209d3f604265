"""The case plan: determinism, curves, repair, fit, fp16 fan-in and sampling (the covering array, slices and the
frontier: test_covering.py, test_slices.py, test_frontier.py)."""

import math
import re

import pytest

from popcorn.bench import plan as P
from popcorn.core import Case
from popcorn.kernels import OPS

BIG = int(141e9)


@pytest.fixture(scope="module")
def plans():
    cache = {}

    def get(name, device_bytes=BIG):
        if (name, device_bytes) not in cache:
            cache[name, device_bytes] = P.case_plan(OPS[name], device_bytes)
        return cache[name, device_bytes]

    return get


def _ids(plan):
    return [(p.case.case_id, p.grad, p.stratum, p.series) for p in plan.cases]


# -- determinism and shape of the plan -------------------------------------------------------

def test_deterministic(plans):
    for name in ("rms_norm", "attn", "group_norm"):
        a, b = plans(name), P.case_plan(OPS[name], BIG)
        assert _ids(a) == _ids(b)
        assert a.curves == b.curves and a.dropped == b.dropped


@pytest.mark.parametrize("name", ["rms_norm", "attn", "cross_entropy", "group_norm", "rope", "embedding"])
def test_plan_invariants(plans, name):
    op, plan = OPS[name], plans(name)
    assert plan.op == name and plan.cases
    keys = [(p.case.case_id, p.grad) for p in plan.cases]
    assert len(keys) == len(set(keys))
    ids = {p.case.case_id for p in plan.cases}
    for p in plan.cases:
        assert re.fullmatch(r"(coverage|production|long)-(float32|bfloat16|float16)-(grad|fwd)", p.stratum)
        assert p.stratum == f"{p.stratum.split('-')[0]}-{p.case.dtype}-{'grad' if p.grad else 'fwd'}"
        assert p.series == "coverage" or p.series.startswith("curve:")
        assert P.repair(op, p.case) == p.case  # every case is already repaired
        assert set(p.case.args) == set(op.scalars)
        assert P.fits(op, p.case, p.grad, BIG)
    for c in plan.curves:
        assert len(c.case_ids) >= 2 and set(c.case_ids) <= ids
        assert re.fullmatch(r"[a-z0-9_.+-]+", c.name.split(":")[-1])


@pytest.mark.parametrize("name", ["rms_norm", "attn", "cross_entropy", "layer_norm"])
def test_smallest_first_within_each_stratum(plans, name):
    op, plan = OPS[name], plans(name)
    strata = [p.stratum for p in plan.cases]
    order = list(dict.fromkeys(strata))
    assert strata == sorted(strata, key=order.index)  # each stratum is one contiguous block
    profile_rank = [("coverage", "production", "long").index(s.split("-")[0]) for s in order]
    assert profile_rank == sorted(profile_rank)
    for s in order:
        block = [p for p in plan.cases if p.stratum == s]
        keys = [(P.estimated_bytes(op, p.case), p.case.case_id) for p in block]
        assert keys == sorted(keys)


def test_batch_axis_builds_batch():
    op = OPS["rms_norm"]
    args = {"eps": 1e-6}
    assert P.build(op, {"...": 0, "normalized_shape": 64}, "float32", args, ()).batch == ()
    assert P.build(op, {"...": 8, "normalized_shape": 64}, "float32", args, ()).batch == (8,)


# -- repair --------------------------------------------------------------------------------

def _attn(**dims):
    base = {"batch": 2, "q_heads": 32, "kv_heads": 8, "seq": 128, "head_dim": 64}
    return Case({**base, **dims}, (), "float32", {"is_causal": True, "scale": None})


def test_repair_kv_heads():
    op = OPS["attn"]
    assert P.repair(op, _attn(q_heads=12, kv_heads=8)).dims["kv_heads"] == 6
    assert P.repair(op, _attn(q_heads=32, kv_heads=40)).dims["kv_heads"] == 32
    assert P.repair(op, _attn(q_heads=6, kv_heads=4)).dims["kv_heads"] == 3
    assert P.repair(op, _attn(q_heads=1, kv_heads=128)).dims["kv_heads"] == 1
    ok = _attn(q_heads=32, kv_heads=8)
    assert P.repair(op, ok) is ok


def _rope(cos_batch=(), **dims):
    base = {"batch": 8, "q_heads": 32, "kv_heads": 8, "seq": 64, "head_dim": 128}
    return Case({**base, **dims}, cos_batch, "float32", {})


def test_repair_rope_table_batch():
    op = OPS["rope"]
    assert P.repair(op, _rope((4,))).batch == (1,)
    assert P.repair(op, _rope((8,))).batch == (8,)
    assert P.repair(op, _rope((2,), batch=1)).batch == (1,)
    assert P.repair(op, _rope(())).batch == ()  # one (seq, head_dim) table for the whole batch


def test_repair_rope_head_dim_even():
    op = OPS["rope"]
    assert P.repair(op, _rope(head_dim=81)).dims["head_dim"] == 80
    assert P.repair(op, _rope(head_dim=1)).dims["head_dim"] == 2
    assert P.repair(OPS["attn"], _attn(head_dim=81)).dims["head_dim"] == 81  # only rope halves head_dim


def test_repair_boundaries():
    op = OPS["attn_varlen"]
    case = Case({"total": 8, "q_heads": 4, "kv_heads": 4, "head_dim": 64, "boundaries": 33}, (), "float32",
                {"is_causal": True, "scale": None})
    assert P.repair(op, case).dims["boundaries"] == 9
    ok = Case({**case.dims, "total": 4096}, (), "float32", case.args)
    assert P.repair(op, ok).dims["boundaries"] == 33


def test_repair_num_groups():
    op = OPS["group_norm"]

    def gn(channels, groups):
        return Case({"batch": 2, "channels": channels, "width": 16}, (), "float32", {"num_groups": groups, "eps": 1e-5})

    assert P.repair(op, gn(48, 32)).args["num_groups"] == 24
    assert P.repair(op, gn(17, 8)).args["num_groups"] == 1
    assert P.repair(op, gn(17, 32)).args["num_groups"] == 17
    assert P.repair(op, gn(8, 32)).args["num_groups"] == 8
    assert P.repair(op, gn(4096, 32)).args["num_groups"] == 32
    repaired = P.repair(op, gn(48, 32))
    assert P.repair(op, repaired) == repaired  # idempotent


# -- fit and fp16 fan-in -------------------------------------------------------------------

def test_estimated_bytes_and_copies():
    rms = OPS["rms_norm"]
    case = Case({"normalized_shape": 4096}, (8,), "bfloat16", {"eps": 1e-6})
    assert P.estimated_bytes(rms, case) == (8 * 4096 + 4096) * 2
    ce = OPS["cross_entropy"]
    case = Case({"tokens": 16, "vocab": 100}, (), "float32", {"ignore_index": -100, "label_smoothing": 0.0,
                                                               "reduction": "mean"})
    assert P.estimated_bytes(ce, case) == 16 * 100 * 4 + 16 * 8  # integer targets: 8 bytes an element
    ln = OPS["layer_norm"]
    bare = Case({"normalized_shape": 64}, (), "float16", {"eps": 1e-5})
    with_bias = Case({"normalized_shape": 64}, (), "float16", {"eps": 1e-5}, ("bias",))
    assert P.estimated_bytes(ln, with_bias) == P.estimated_bytes(ln, bare) + 64 * 2
    assert (P.copies("float32", True), P.copies("bfloat16", True)) == (11, 15)
    assert (P.copies("float32", False), P.copies("float16", False)) == (7, 9)


def test_fit_drops_large_cases(plans):
    op = OPS["rms_norm"]
    small = 50 * 2**20
    plan = P.case_plan(op, small)
    assert plan.dropped > 0 and plans("rms_norm").dropped == 0
    assert len(plan.cases) < len(plans("rms_norm").cases)
    for p in plan.cases:
        assert P.estimated_bytes(op, p.case) * P.copies(p.case.dtype, p.grad) <= small * 0.9
    case = Case({"normalized_shape": 53248}, (64,), "float32", {"eps": 1e-6})
    assert not P.fits(op, case, True, small) and P.fits(op, case, True, BIG)
    assert P.case_plan(op, 1).cases == []


def test_fp16_fan_in_forward_only():
    emb = OPS["embedding"]

    def e(tokens, dtype):
        return Case({"vocab": 1024, "hidden": 64}, (tokens,), dtype, {})

    # weight (vocab hidden) lacks the token rows: its gradient sums over every token
    assert not P.wants_grad(emb, e(32768, "float16"))
    assert P.wants_grad(emb, e(16384, "float16"))
    assert P.wants_grad(emb, e(32768, "bfloat16")) and P.wants_grad(emb, e(1 << 20, "float32"))
    rms = OPS["rms_norm"]
    # no temporal dim: the weight (normalized_shape) lacks '...', so only the batch product counts
    assert P.wants_grad(rms, Case({"normalized_shape": 64}, (64,), "float16", {"eps": 1e-6}))
    assert not P.wants_grad(rms, Case({"normalized_shape": 64}, (32768,), "float16", {"eps": 1e-6}))
    attn = OPS["attn"]
    assert P.wants_grad(attn, Case({**_attn().dims, "seq": 1 << 20}, (), "float16", _attn().args))


def test_fp16_fan_in_in_plan(plans):
    plan = plans("embedding")
    fwd = [p for p in plan.cases if not p.grad]
    assert fwd and all(p.case.dtype == "float16" and math.prod(p.case.batch) >= 32768 for p in fwd)
    assert all(p.stratum.endswith("-fwd") for p in fwd)
    assert all(p.grad for p in plan.cases if p.case.dtype != "float16")
    assert all(p.grad for p in plans("attn").cases)


# -- curves --------------------------------------------------------------------------------

def test_rms_norm_curves(plans):
    plan = plans("rms_norm")
    names = [c.name for c in plan.curves]
    want = []
    for dtype in ("float32", "bfloat16", "float16"):
        want += [f"curve:production:...:{dtype}:base", f"curve:production:normalized_shape:{dtype}:base",
                 f"curve:production:normalized_shape:{dtype}:arg-eps-1e-05"]
    want += [f"curve:long:...:{dtype}:base" for dtype in ("float32", "bfloat16", "float16")]
    assert names == want  # token rows are rms_norm's temporal axis: long-context curves past 64K
    by = {c.name: c for c in plan.curves}
    c = by["curve:production:normalized_shape:bfloat16:base"]
    assert (c.profile, c.axis, c.dtype, c.variant) == ("production", "normalized_shape", "bfloat16", "base")
    assert c.fixed_dims == {} and c.batch == (4096,) and c.args == {"eps": 1e-6} and c.present == ()
    cases = {p.case.case_id: p.case for p in plan.cases}
    xs = [cases[i].dims["normalized_shape"] for i in c.case_ids]
    assert xs == sorted(xs) and len(xs) == 34
    assert all(cases[i].dtype == "bfloat16" and cases[i].batch == (4096,) for i in c.case_ids)
    b = by["curve:production:...:bfloat16:base"]
    assert b.fixed_dims == {"normalized_shape": 4096}
    rows = [cases[i].batch for i in b.case_ids]
    assert rows[0] == () and rows[-1] == (65536,)  # training's batch x sequence tokens, to 64K
    assert {(2 ** k,) for k in range(17)} <= set(rows)
    assert [cases[i].batch[0] for i in by["curve:long:...:bfloat16:base"].case_ids][-1] == 1024 * 1024
    assert by["curve:production:normalized_shape:float16:arg-eps-1e-05"].args == {"eps": 1e-5}
    series = {p.series for p in plan.cases}
    assert series <= {"coverage"} | set(names)


def test_the_fit_rule_counts_the_declared_workspace():
    # attn at seq 16384 on a CPU budget: inputs of a few MB, but the reference's scores are 8 GiB per head
    from popcorn.bench.fill import CPU_BUDGET_BYTES

    case = P.build(OPS["attn"], {"batch": 1, "q_heads": 8, "kv_heads": 8, "seq": 16384, "head_dim": 64},
                   "float32", {"is_causal": True, "scale": None}, ())
    assert P.estimated_bytes(OPS["attn"], case) * P.copies("float32", True) < CPU_BUDGET_BYTES
    assert not P.fits(OPS["attn"], case, True, CPU_BUDGET_BYTES)
    plan = P.case_plan(OPS["attn"], CPU_BUDGET_BYTES)
    assert plan.cases and all(P.fits(OPS["attn"], p.case, p.grad, CPU_BUDGET_BYTES) for p in plan.cases)
    assert max(p.case.dims["seq"] for p in plan.cases) < 16384


def test_curves_only_keeps_every_curve_point_and_nothing_else(plans):
    plan = plans("softmax")
    curves = P.curves_only(plan)
    ids = {i for c in plan.curves for i in c.case_ids}
    assert {p.case.case_id for p in curves.cases} == ids and len(curves.cases) < len(plan.cases)


def test_curve_points_keep_each_curves_smallest_points_alone(plans):
    plan = plans("softmax")
    two = P.curves_only(plan, points=2)
    want = {i for c in plan.curves for i in c.case_ids[:2]}
    assert {p.case.case_id for p in two.cases} == want and len(two.cases) < len(P.curves_only(plan).cases)
    assert [c.name for c in two.curves] == [c.name for c in plan.curves]  # every curve, each with 2 points
    assert all(c.case_ids == full.case_ids[:2] for c, full in zip(two.curves, plan.curves))


def test_static_gates_are_known_at_plan_time_and_forward_only_is_none(plans):
    from popcorn.bench.plan_view import summarize

    attn = OPS["attn"]
    plan = plans("attn")
    fp32 = next(p for p in plan.cases if p.case.dtype == "float32")
    assert P.gated(attn, attn["sdpa:cudnn"], fp32) == "gate"  # cuDNN attention is gated to fp16/bf16
    assert P.gated(attn, attn["sdpa:flash"], fp32) is None  # predicates need tensors: decided later
    summary = summarize(attn, BIG)
    assert summary.gated["sdpa:cudnn"] == sum(1 for p in plan.cases if p.case.dtype == "float32")
    assert summary.gated["torch"] == 0
    # forward-only is not a gate: the fill measures fla's logsumexp forward on the gradient cases
    assert all(p.grad for p in plans("logsumexp").cases) and summarize(OPS["logsumexp"], BIG).gated["fla"] == 0


def test_attn_curves(plans):
    plan = plans("attn")
    by = {c.name: c for c in plan.curves}
    cases = {p.case.case_id: p.case for p in plan.cases}
    seq = by["curve:production:seq:float32:base"]
    assert seq.fixed_dims == {"batch": 8, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
    assert max(cases[i].dims["seq"] for i in seq.case_ids) <= 32768
    assert "curve:production:seq:bfloat16:arg-is_causal-false" in by
    assert "curve:production:seq:bfloat16:arg-scale-0.125" in by
    assert "curve:production:head_dim:float32:arg-is_causal-false" not in by  # only the primary axis varies args
    long = by["curve:long:seq:float16:base"]
    assert long.fixed_dims == {"batch": 1, "q_heads": 1, "kv_heads": 1, "head_dim": 64}
    assert min(cases[i].dims["seq"] for i in long.case_ids) >= 8192
    assert {c.axis for c in plan.curves if c.profile == "long"} == {"seq"}
    # pinned dims stay pinned: q_heads points whose kv_heads=8 would be repaired are dropped
    qh = by["curve:production:q_heads:float32:base"]
    assert all(cases[i].dims["kv_heads"] == 8 for i in qh.case_ids)
    kv = by["curve:production:kv_heads:float32:base"]
    assert [cases[i].dims["kv_heads"] for i in kv.case_ids] == [1, 2, 4, 8, 16, 32]


def test_present_variant_curve(plans):
    plan = plans("layer_norm")
    by = {c.name: c for c in plan.curves}
    c = by["curve:production:normalized_shape:float32:present-bias"]
    assert c.present == ("bias",)
    cases = {p.case.case_id: p.case for p in plan.cases}
    assert all(cases[i].present == ("bias",) for i in c.case_ids)

# -- sampling ------------------------------------------------------------------------------

def test_sample(plans):
    plan = plans("attn")
    a, b = P.sample(plan, 50), P.sample(plan, 50)
    assert len(a.cases) == 50 and _ids(a) == _ids(b)
    index = {(p.case.case_id, p.grad): i for i, p in enumerate(plan.cases)}
    positions = [index[p.case.case_id, p.grad] for p in a.cases]
    assert positions == sorted(positions)  # plan (stratum, smallest-first) order kept
    sampled = {p.case.case_id for p in a.cases}
    assert all(c.case_ids and set(c.case_ids) <= sampled for c in a.curves)
    assert len(P.sample(plan, 10**6).cases) == len(plan.cases)
    assert _ids(P.sample(plan, 10)) != _ids(P.sample(plans("rms_norm"), 10))


def test_a_sample_draws_every_curve_it_has_room_for(plans):
    plan = P.curves_only(plans("rms_norm"))
    room = 2 * len(plan.curves)
    a = P.sample(plan, room)
    # every curve keeps its two smallest points: a limited fill still passes the release check's curve rule
    assert len(a.cases) == room and [c.name for c in a.curves] == [c.name for c in plan.curves]
    full = {c.name: c.case_ids for c in plan.curves}
    assert all(len(c.case_ids) >= 2 and set(full[c.name][:2]) <= set(c.case_ids) for c in a.curves)
    small = P.sample(plan, 5)  # room for two curves: those two are whole, not five curves of one point
    assert len(small.cases) == 5 and sum(len(c.case_ids) >= 2 for c in small.curves) >= 2
