"""Slices: parsing `--slice` tokens (bench/slice_spec.py) and planning one axis in a fixed context."""

import pytest

from popcorn.bench import plan as P
from popcorn.bench.slice_spec import parse_slice
from popcorn.kernels import OPS

BIG = int(141e9)


def _ids(plan):
    return [(p.case.case_id, p.grad, p.stratum, p.series) for p in plan.cases]


def test_parse_slice_example():
    op = OPS["rms_norm"]
    axis, ctx = parse_slice(op, ["normalized_shape", "dtype=float16", "...=[8]", "eps=0.000001"])
    assert axis == "normalized_shape"
    assert ctx == {"dtype": "float16", "...": [8], "eps": 1e-6, "present": ()}
    axis, ctx = parse_slice(OPS["layer_norm"],
                              ["...", "dtype=bfloat16", "normalized_shape=4096", "eps=1e-05", "+bias"])
    assert axis == "..." and ctx["present"] == ("bias",) and ctx["normalized_shape"] == 4096
    _, ctx = parse_slice(OPS["cross_entropy"], ["tokens", "reduction=sum", "label_smoothing=0"])
    assert ctx["reduction"] == "sum" and ctx["label_smoothing"] == 0.0 and type(ctx["label_smoothing"]) is float


def test_parse_slice_errors():
    op = OPS["rms_norm"]
    with pytest.raises(ValueError, match="valid: .*normalized_shape.*dtype.*eps"):
        parse_slice(op, ["normalized_shape", "epsilon=1e-6"])
    with pytest.raises(ValueError, match="axes are"):
        parse_slice(op, ["hidden", "dtype=float32"])
    with pytest.raises(ValueError, match="optional"):
        parse_slice(op, ["normalized_shape", "+bias"])
    with pytest.raises(ValueError, match="name=JSON"):
        parse_slice(op, ["normalized_shape", "float16"])
    with pytest.raises(ValueError, match="axis"):
        parse_slice(op, [])
    with pytest.raises(ValueError, match="int"):
        parse_slice(op, ["...", "normalized_shape=big"])


def test_slice_keeps_context():
    op = OPS["rms_norm"]
    axis, ctx = parse_slice(op, ["normalized_shape", "dtype=float16", "...=[8]", "eps=0.000001"])
    plan = P.slice_cases(op, axis, ctx, BIG)
    assert len(plan.cases) == 34 and len(plan.curves) == 1
    for p in plan.cases:
        assert p.case.batch == (8,) and p.case.dtype == "float16" and p.case.args == {"eps": 1e-6}
        assert p.stratum == "production-float16-grad" and p.series == plan.curves[0].name
    assert plan.curves[0].case_ids == tuple(p.case.case_id for p in
                                            sorted(plan.cases, key=lambda p: p.case.dims["normalized_shape"]))
    # the same slice twice is the same plan, whichever form the batch takes
    again = P.slice_cases(op, axis, {**ctx, "...": (8,)}, BIG)
    assert _ids(again) == _ids(plan) and again.curves == plan.curves


def test_slice_drops_instead_of_altering():
    op = OPS["attn_varlen"]
    ctx = {"dtype": "bfloat16", "q_heads": 32, "kv_heads": 8, "head_dim": 128, "boundaries": 33,
           "causal": True, "scale": None}
    plan = P.slice_cases(op, "total", ctx, BIG)
    totals = sorted(p.case.dims["total"] for p in plan.cases)
    assert totals and min(totals) >= 32 and max(totals) <= 32768  # total < 32 would repair boundaries
    assert all(p.case.dims["boundaries"] == 33 for p in plan.cases)
    gn = OPS["group_norm"]
    plan = P.slice_cases(gn, "channels", {"dtype": "float32", "batch": 8, "width": 256, "num_groups": 32,
                                          "eps": 1e-5}, BIG)
    assert plan.cases and all(p.case.args["num_groups"] == 32 and p.case.dims["channels"] % 32 == 0
                              for p in plan.cases)
    # the swept axis itself may be repaired (kv_heads 40, 64, 128 -> 32), the context may not
    kv = P.slice_cases(OPS["attn"], "kv_heads", {"dtype": "float32", "batch": 2, "q_heads": 32, "seq": 256,
                                                  "head_dim": 64, "is_causal": True, "scale": None}, BIG)
    assert sorted(p.case.dims["kv_heads"] for p in kv.cases) == [1, 2, 4, 8, 16, 32]


def test_slice_missing_context():
    op = OPS["attn"]
    with pytest.raises(ValueError, match=r"lacks .*kv_heads.*is_causal.*scale"):
        P.slice_cases(op, "seq", {"dtype": "float32", "batch": 1, "q_heads": 8, "head_dim": 64}, BIG)
    with pytest.raises(ValueError, match="lacks \\.\\.\\."):
        P.slice_cases(OPS["rms_norm"], "normalized_shape", {"dtype": "float32", "eps": 1e-6}, BIG)
    with pytest.raises(ValueError, match="dtype"):
        P.slice_cases(OPS["rms_norm"], "normalized_shape", {"dtype": "int8", "...": [], "eps": 1e-6}, BIG)


def test_slice_fit_and_temporal_cap():
    op = OPS["cross_entropy"]
    ctx = {"dtype": "float32", "vocab": 128256, "ignore_index": -100, "label_smoothing": 0.0, "reduction": "mean"}
    plan = P.slice_cases(op, "tokens", ctx, BIG)
    tokens = [p.case.dims["tokens"] for p in plan.cases]
    assert max(tokens) < 32768 and plan.dropped > 0  # 32K x 128256 fp32 cannot fit its copies in 141 GB
