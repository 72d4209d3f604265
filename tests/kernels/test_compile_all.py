"""The compile backend agrees with every op's reference on CPU, gradients included, judged by the harness."""

import pytest

from popcorn.bench.compare import check
from popcorn.bench.plan import repair
from popcorn.core import Case
from popcorn.core.inputs import make_inputs
from popcorn.kernels import OPS

SMALL = {"q_heads": 4, "kv_heads": 2, "boundaries": 3, "channels": 32, "vocab": 17,
         "head_dim": 8, "total": 12}


def small_case(op) -> Case:
    names = {n for spec in op.specs.values() for n in spec.names}
    dims = {n: SMALL.get(n, 8) for n in names}
    batch = (3,) if any(spec.variadic for spec in op.specs.values()) else ()
    return repair(op, Case(dims, batch, "float32", {}, tuple(op.optional)))  # rope's table batch: none, 1 or batch


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPS))
def test_compile_matches_reference(name):
    op = OPS[name]
    case = small_case(op)
    impl = op["compile"]
    result = check(op.reference, lambda **a: impl.invoke(a), lambda t: make_inputs(op, case, seed=t),
                   trials=2, grad=True)
    assert result.status == "pass", f"{name} {case.label}: {result.status}: {result.reason}"
    assert result.bwd, "gradients were checked"


def test_catalog_has_twenty_one_ops_with_torch_and_compile():
    assert len(OPS) == 21
    for op in OPS.values():
        assert list(op.implementations)[:2] == ["torch", "compile"]
    assert {"sdpa:flash", "sdpa:efficient", "sdpa:cudnn", "sdpa:math"} <= set(OPS["attn"].implementations)
