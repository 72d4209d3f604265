"""The coverage profile (bench/plan/covering.py): every value and value pair of two axes appears."""

from itertools import combinations

import pytest

from popcorn.bench import plan as P
from popcorn.kernels import OPS


@pytest.mark.parametrize("name", ["rms_norm", "attn", "cross_entropy", "layer_norm", "group_norm"])
def test_pairwise_coverage_before_repair(name):
    """Every value of every axis and every value pair of every two axes appears in the covering
    rows. This holds before repair only: repair (kv_heads, num_groups, ...) may merge rows."""
    op = OPS[name]
    axes = P.coverage_axes(op)
    rows = P.coverage_rows(op)
    names = [a for a, _ in axes]
    assert "dtype" in names and set(P.dim_axes(op)) <= set(names)
    assert set(op.arg_pools) <= set(names) and {f"+{o}" for o in op.optional} <= set(names)
    for axis, pool in axes:
        assert {repr(r[axis]) for r in rows} == {repr(v) for v in pool}, axis
    for (a, pa), (b, pb) in combinations(axes, 2):
        seen = {(repr(r[a]), repr(r[b])) for r in rows}
        want = {(repr(x), repr(y)) for x in pa for y in pb}
        assert want <= seen, (a, b, sorted(want - seen)[:5])
    first = {a: pool[0] for a, pool in axes}
    last = {a: pool[-1] for a, pool in axes}
    assert rows[0] == first and rows[-1] == last


def test_coverage_axes_of_attn_and_cross_entropy():
    attn = dict(P.coverage_axes(OPS["attn"]))
    assert attn["dtype"] == ("float32", "bfloat16", "float16")
    assert attn["seq"][-1] == 1024 * 1024 and attn["kv_heads"] == (1, 2, 4, 8, 16, 32, 40, 64, 128)
    assert attn["is_causal"] == (True, False) and attn["scale"] == (None, 0.125)
    ce = dict(P.coverage_axes(OPS["cross_entropy"]))
    assert set(ce) == {"tokens", "vocab", "dtype", "ignore_index", "label_smoothing", "reduction"}
    rms = dict(P.coverage_axes(OPS["rms_norm"]))
    # a row-wise op's '...' counts token rows: edge sizes and training sizes to 64K
    assert rms["..."] == (0, 1, 3, 17, 64, 1447, 4096, 65536)
    assert dict(P.coverage_axes(OPS["matmul"]))["..."] == (0, 1, 2, 4, 8, 16, 32, 64)
    assert dict(P.coverage_axes(OPS["layer_norm"]))["+bias"] == (False, True)


def test_covering_rows_complete_for_small_signatures():
    for sizes in ([2], [3, 1], [1, 1, 1], [4, 3, 2, 2, 2], [5, 5, 5]):
        rows = P.covering_rows(sizes)
        for i, j in combinations(range(len(sizes)), 2):
            assert {(r[i], r[j]) for r in rows} == {(a, b) for a in range(sizes[i]) for b in range(sizes[j])}
        assert rows[0] == tuple(0 for _ in sizes) and rows[-1] == tuple(s - 1 for s in sizes)
