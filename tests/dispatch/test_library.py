"""Ops as torch.library custom ops: whole graphs under torch.compile, gradients through dispatch."""

import pytest
import torch

from popcorn.kernels import OPS, cross_entropy, rms_norm, softmax


def test_every_op_is_a_custom_op():
    for name, op in OPS.items():
        assert op.library is not None and hasattr(torch.ops.popcorn, name), name
    assert len(OPS["rope"].outputs) == 2  # multi-output ops too: no Python dispatch under dynamo


@pytest.mark.parametrize("case", ["rms_norm", "softmax", "cross_entropy"])
def test_compiled_fullgraph_matches_eager_with_gradients(case):
    torch.manual_seed(0)
    if case == "rms_norm":
        args, fn = [torch.randn(4, 8), torch.randn(8)], lambda x, w: rms_norm(x, w, eps=1e-5) * 2
    elif case == "softmax":
        args, fn = [torch.randn(3, 17)], lambda x: softmax(x).log()
    else:
        target = torch.tensor([1, 0, 4, -100])
        args, fn = [torch.randn(4, 5)], lambda x: cross_entropy(x, target, label_smoothing=0.1) + 1
    eager_in = [a.clone().requires_grad_() for a in args]
    comp_in = [a.clone().requires_grad_() for a in args]
    want = fn(*eager_in)
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(*comp_in)  # raises on any graph break
    torch.testing.assert_close(got, want)
    want.sum().backward()
    got.sum().backward()
    for a, b in zip(comp_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad)


# -- every op compiles whole, cold: no decision made yet, no eager call before ----------------------

def _small_inputs(op, grad):
    from tests.kernels.test_conformance import small_case
    from popcorn.core.inputs import make_inputs

    args = make_inputs(op, small_case(op), seed=0)
    return {k: v.requires_grad_(grad) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in args.items()}


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_compiles_cold_with_fullgraph_and_matches_eager(name, mode, tmp_path, monkeypatch):
    import torch._dynamo

    from popcorn.dispatch import forget

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    op = OPS[name]
    forget()
    torch._dynamo.reset()
    assert not op._memo  # cold: nothing decided
    grad = mode == "train"
    eager, compiled = _small_inputs(op, grad), _small_inputs(op, grad)

    def fn(**a):
        out = op(**a)
        return out if isinstance(out, tuple) else (out,)

    with torch.set_grad_enabled(grad):
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(**compiled)  # raises on a graph break
        want = fn(**eager)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    if grad:
        sum(o.float().sum() for o in got).backward()
        sum(o.float().sum() for o in want).backward()
        for k, v in compiled.items():
            if isinstance(v, torch.Tensor) and v.requires_grad:
                torch.testing.assert_close(v.grad, eager[k].grad, msg=lambda m: f"grad {k}: {m}")


def test_compiled_calls_decide_once(monkeypatch, tmp_path):
    from popcorn.core import registry
    from popcorn.dispatch import forget

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    forget()
    decided = []
    real = registry.Layers.dispatcher
    monkeypatch.setattr(registry.Layers, "dispatcher", lambda *a: decided.append(a[0].name) or real(*a))
    f = torch.compile(lambda x, w: rms_norm(x, w), fullgraph=True, backend="aot_eager")
    x, w = torch.randn(4, 8), torch.randn(8)
    for _ in range(5):
        f(x, w)
    assert decided == ["rms_norm"]  # decided once (ranked for a graph); later compiled calls read the memo


def _graph_targets(fn, *args):
    """The call targets of the FX graph torch.compile traces for fn(*args)."""
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward
    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return targets


def test_a_reference_decision_is_traced_inline_and_another_backend_stays_opaque(tmp_path, monkeypatch):
    import popcorn
    from popcorn.core import Backend, Float, declare_backend, register_kernel
    from popcorn.dispatch import forget

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    forget()
    torch._dynamo.reset()
    x, w = torch.randn(4, 8), torch.randn(8)
    inline = _graph_targets(lambda x, w: rms_norm(x, w) * 2, x, w)
    assert not any("popcorn" in t for t in inline)  # the reference's own ops: inductor can fuse them
    declare_backend(Backend("toy", None))

    @register_kernel(compile=False)
    def toy_double(x: Float["... hidden"]) -> Float["... hidden"]:
        """Double.

        $$y = 2x$$
        """
        return 2 * x
    toy_double.register("toy:eager", lambda x: x + x)
    toy_double.enable_library()
    torch._dynamo.reset()
    with popcorn.use("toy:eager"):
        opaque = _graph_targets(lambda x: toy_double(x) + 1, x)
        got = torch.compile(lambda x: toy_double(x) + 1, fullgraph=True, backend="aot_eager")(x)
    assert "popcorn.toy_double.default" in opaque
    torch.testing.assert_close(got, 2 * x + 1)


def test_the_traced_decision_is_marked_as_dynamo_would_mark_it():
    import torch._dynamo

    from popcorn.core import library

    marked = torch._dynamo.assume_constant_result(lambda: 0)
    flags = {k for k in vars(marked) if k.startswith("_dynamo")}
    assert flags == {"_dynamo_marked_constant"} and all(getattr(library._decide_for_graph, k) for k in flags)


def test_dynamic_shape_compiles_specialize_the_shapes_popcorn_decides_on():
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: rms_norm(x, w) * 2, dynamic=True, fullgraph=True)
    for rows in (4, 7, 4):
        x, w = torch.randn(rows, 8), torch.randn(8)
        torch.testing.assert_close(f(x, w), rms_norm.reference(x, w) * 2)
