"""Constraints declared on ops: each constructor checks and repairs; binding and the plan consume them."""

import pytest
import torch

from popcorn.bench import plan as P
from popcorn.core import Case, DispatchError, Float, register_kernel
from popcorn.core.constraints import (ConstraintError, Values, at_least, at_most, batch_broadcasts, divides, even,
                                      multiple_of, repaired, violation)
from popcorn.kernels import OPS


def problem(c, dims, batch=(), args=None):
    return c.violation(Values(dict(dims), batch, dict(args or {})))


def fixed(constraints, dims, batch=(), args=None):
    """Repaired values, checked idempotent: repairing them again changes nothing."""
    out = repaired(constraints, dims, batch, args or {})
    assert repaired(constraints, *out) == out
    return out


def test_divides_checks_and_repairs_dims():
    c = divides("kv_heads", "q_heads")
    assert problem(c, {"q_heads": 32, "kv_heads": 8}) is None
    msg = problem(c, {"q_heads": 12, "kv_heads": 8})
    assert "q_heads=12" in msg and "kv_heads=8" in msg and "nearest valid kv_heads is 6" in msg
    assert "kv_heads=0" in problem(c, {"q_heads": 4, "kv_heads": 0})
    for q, kv, want in [(12, 8, 6), (32, 40, 32), (6, 4, 3), (1, 128, 1), (32, 8, 8)]:
        assert fixed([c], {"q_heads": q, "kv_heads": kv})[0]["kv_heads"] == want


def test_divides_on_a_scalar():
    c = divides("num_groups", "channels")
    assert "channels=17 is not divisible by num_groups=8" in problem(c, {"channels": 17}, args={"num_groups": 8})
    for channels, groups, want in [(48, 32, 24), (17, 8, 1), (17, 32, 17), (8, 32, 8), (4096, 32, 32)]:
        dims, _, args = fixed([c], {"channels": channels}, args={"num_groups": groups, "eps": 1e-5})
        assert args == {"num_groups": want, "eps": 1e-5} and dims == {"channels": channels}
    # a rule applies only when every value it reads is an int that is present
    assert problem(c, {"channels": 17}, args={"num_groups": None}) is None
    assert problem(c, {}, args={"num_groups": 8}) is None
    assert fixed([c], {}, args={"num_groups": 8}) == ({}, (), {"num_groups": 8})


def test_multiple_of_and_even():
    c = multiple_of("seq", 64)
    assert problem(c, {"seq": 128}) is None and problem(c, {"seq": 0}) is None
    assert problem(c, {"seq": 100}) == "seq=100 must be a multiple of 64; use 64 or 128"
    assert problem(c, {"seq": 3}) == "seq=3 must be a multiple of 64; use 64"
    assert [fixed([c], {"seq": s})[0]["seq"] for s in (100, 3, 64, 129)] == [64, 64, 64, 128]
    e = even("head_dim", why="halves")
    assert problem(e, {"head_dim": 7}) == "head_dim=7 must be even (halves); use 6 or 8"
    assert [fixed([e], {"head_dim": h})[0]["head_dim"] for h in (81, 1, 80)] == [80, 2, 80]
    with pytest.raises(ValueError, match="positive int"):
        multiple_of("seq", 0)


def test_at_most_and_at_least():
    c = at_most("head_dim", 256)
    assert problem(c, {"head_dim": 256}) is None
    assert problem(c, {"head_dim": 512}) == "head_dim=512 must be at most 256; use 256"
    assert fixed([c], {"head_dim": 512})[0] == {"head_dim": 256}
    b = at_most("boundaries", "total+1")
    assert problem(b, {"boundaries": 33, "total": 8}) == "boundaries=33 must be at most total+1=9; use 9"
    assert fixed([b], {"boundaries": 33, "total": 8})[0]["boundaries"] == 9
    assert fixed([b], {"boundaries": 33, "total": 4096})[0]["boundaries"] == 33
    assert problem(b, {"boundaries": 33}) is None  # total absent: nothing to compare with
    lo = at_least("seq", "head_dim/2")
    assert "seq=3 must be at least head_dim/2=32" in problem(lo, {"seq": 3, "head_dim": 64})
    assert fixed([lo], {"seq": 3, "head_dim": 64})[0]["seq"] == 32
    with pytest.raises(ValueError, match="bad shape token"):
        at_most("seq", "2 * total")


def test_batch_broadcasts():
    c = batch_broadcasts("batch", of="cos/sin")
    for ok in ((), (1,), (8,)):
        assert problem(c, {"batch": 8}, ok) is None
    assert "cos/sin leading dims [4] must be none" in problem(c, {"batch": 8}, (4,))
    assert fixed([c], {"batch": 8}, (4,))[1] == (1,)
    assert fixed([c], {"batch": 1}, (2,))[1] == (1,)
    assert fixed([c], {"batch": 8}, (8,))[1] == (8,)


def test_contradicting_constraints_are_reported():
    with pytest.raises(ValueError, match="contradict"):
        repaired([at_most("seq", 10), at_least("seq", 20)], {"seq": 15}, (), {})


# -- declared on ops ---------------------------------------------------------------------------

def test_binding_an_attn_call_checks_the_declared_heads():
    q, k = torch.randn(1, 3, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(DispatchError, match=r"q_heads=3.*kv_heads=2") as info:
        OPS["attn"](q, k, k)
    assert isinstance(info.value, ConstraintError) and isinstance(info.value, ValueError)
    assert "layout:" in str(info.value)  # attn's layout hint still ends the message
    with pytest.raises(DispatchError, match=r"q_heads=3.*kv_heads=2"):
        OPS["attn"].bind({"q": q, "k": k, "v": k, "is_causal": False, "scale": None})


def test_plan_only_rules_shape_the_plan_but_not_calls():
    op = OPS["attn_varlen"]
    q = torch.randn(2, 2, 8)
    cu = torch.tensor([0, 1, 2, 2, 2], dtype=torch.int32)  # more boundaries than total + 1: legal
    assert op(q, q, q, cu).shape == q.shape
    case = Case({"total": 2, "q_heads": 2, "kv_heads": 2, "head_dim": 8, "boundaries": 5}, (), "float32",
                {"causal": True, "scale": None})
    assert P.repair(op, case).dims["boundaries"] == 3
    assert violation(op.constraints, case.dims, (), case.args) is None
    assert "kv_heads" in violation(op.constraints, {**case.dims, "kv_heads": 3}, (), case.args)


def toy(**kw):
    @register_kernel(compile=False, tags=("attention",), **kw)
    def chunked(x: Float["batch seq head_dim"], flag: bool = False) -> Float["batch seq head_dim"]:
        """A toy op with a chunked kernel in mind.

        $$y = x$$
        """
        return x
    return chunked


def test_a_declared_chunk_size_and_head_dim_limit_shape_the_plan_without_planner_edits():
    op = toy(constraints=[multiple_of("seq", 64), at_most("head_dim", 128)])
    plan = P.case_plan(op, int(141e9))
    assert plan.cases and plan.curves
    for p in plan.cases:
        assert p.case.dims["seq"] % 64 == 0 and p.case.dims["head_dim"] <= 128
        assert P.repair(op, p.case) is p.case
    seq = next(c for c in plan.curves if c.name == "curve:production:seq:float32:base")
    cases = {p.case.case_id: p.case for p in plan.cases}
    assert [cases[i].dims["seq"] for i in seq.case_ids][:3] == [64, 128, 256]
    with pytest.raises(DispatchError, match="seq=100 must be a multiple of 64; use 64 or 128"):
        op(torch.randn(1, 100, 32))
    assert op(torch.randn(1, 128, 32)).shape == (1, 128, 32)


def test_primary_is_declared_or_defaults_from_the_annotations():
    assert P.primary_axis(toy()) == "seq"  # the first temporal dim
    op = toy(primary="head_dim")
    assert P.primary_axis(op) == "head_dim"
    names = {c.name for c in P.case_plan(op, int(141e9)).curves}
    assert "curve:production:head_dim:float32:arg-flag-true" in names
    assert not any(n.startswith("curve:production:seq:") and "arg-" in n for n in names)
    assert P.primary_axis(OPS["group_norm"]) == "channels" and P.primary_axis(OPS["rms_norm"]) == "normalized_shape"


def test_declarations_are_checked_at_registration():
    with pytest.raises(ValueError, match=r"unknown dims or scalars \['heads'\]"):
        toy(constraints=[divides("heads", "seq")])
    with pytest.raises(ValueError, match="primary='hidden' is not an axis"):
        toy(primary="hidden")
    with pytest.raises(ValueError, match="leading '...'"):
        toy(constraints=[batch_broadcasts("batch")])
    with pytest.raises(ValueError, match="popcorn.core.constraints objects"):
        toy(constraints=[("seq", 64)])
    assert toy(constraints=[divides("seq", "head_dim")]).constraints == (divides("seq", "head_dim"),)
