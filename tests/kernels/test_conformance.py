"""Conformance: every registered backend of every op agrees with the reference on a small case, gradients
included, judged by the harness exactly as a fill judges it. A backend registered later is picked up
without editing this file; one that cannot run here (a CUDA-only kernel on the CPU) is skipped with
the reason its gates or predicate give."""

import pytest
import torch

from popcorn.bench.compare import check
from popcorn.bench.plan import repair
from popcorn.core import Case
from popcorn.core.inputs import make_inputs
from popcorn.kernels import OPS

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # on a GPU machine the CUDA-only backends run too
SMALL = {"q_heads": 4, "kv_heads": 2, "boundaries": 3, "channels": 32, "vocab": 17,
         "head_dim": 8, "total": 12}


def small_case(op) -> Case:
    names = {n for spec in op.specs.values() for n in spec.names}
    dims = {n: SMALL.get(n, 8) for n in names}
    batch = (3,) if any(spec.variadic for spec in op.specs.values()) else ()
    return repair(op, Case(dims, batch, "float32", {}, tuple(op.optional)))  # rope's table batch: none, 1 or batch


PAIRS = [(op.name, impl) for op in OPS.values() for impl in op.implementations if impl != "torch"]


def case_for(op, impl) -> Case:
    """The small case in the first dtype the backend's static gates admit, with the first value a value
    gate admits where the op's default is not one (fla's attention: causal only) and without the
    optionals a gate wants absent."""
    case = small_case(op)
    args, present = dict(case.args), case.present
    for name, gate in op[impl].gates.items():
        default = op.signature.parameters[name].default
        if gate.kind == "values" and args.get(name, default) not in gate.allowed:
            args[name] = sorted(gate.allowed, key=repr)[0]
        if gate.kind == "absent":
            present = tuple(p for p in present if p != name)
    for dtype in ("float32", "bfloat16", "float16"):
        if op[impl].admits_static(dtype, args, present):
            return Case(case.dims, case.batch, dtype, args, present)
    return case


@pytest.mark.slow
@pytest.mark.parametrize("name, impl", PAIRS, ids=[f"{n}-{i}" for n, i in PAIRS])
def test_every_backend_matches_the_reference(name, impl):
    op = OPS[name]
    backend = op[impl]
    case = case_for(op, impl)
    grad = not backend.forward_only
    reason = backend.rejects(make_inputs(op, case, seed=0, device=DEVICE), grad)
    if reason:
        pytest.skip(f"{impl} cannot run {name} {case.label} here: {reason}")
    result = check(op.reference, lambda **a: backend.invoke(a), lambda t: make_inputs(op, case, seed=t, device=DEVICE),
                   trials=2, grad=grad, out_dtypes=backend.expected_dtypes, frozen=backend.no_grad)
    assert result.status == "pass", f"{name}:{impl} {case.label}: {result.status}: {result.reason}"
    assert result.bwd or not grad, "gradients were checked"


def test_the_case_follows_value_gates():
    case = case_for(OPS["attn"], "fla")
    assert case.args["is_causal"] is True and case.dtype == "bfloat16"
    assert case_for(OPS["geglu"], "liger").args.get("approximate", "tanh") == "tanh"


def test_catalog_has_twenty_one_ops_with_torch_and_compile():
    assert len(OPS) == 21
    for op in OPS.values():
        assert list(op.implementations)[:2] == ["torch", "compile"]
    assert {"sdpa:flash", "sdpa:efficient", "sdpa:cudnn", "sdpa:math"} <= set(OPS["attn"].implementations)
