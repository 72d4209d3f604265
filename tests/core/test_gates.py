import pytest
import torch

from popcorn.core import Float, absent, dtypes, one_of, register_kernel


def make():
    @register_kernel(compile=False)
    def toy_gated(x: Float["... hidden"], bias: Float["hidden"] | None = None, mode: str = "a") -> Float["... hidden"]:
        """Identity.

        $$y = x$$
        """
        return x
    return toy_gated


def test_explicit_gates_reject_what_they_name():
    op = make()
    impl = op.register("torch:gated", lambda x, bias, mode: x,
                       gates={"x": dtypes(torch.float16), "bias": absent(), "mode": one_of("a")})
    op_impl = op["torch:gated"]
    args = op.arguments((torch.randn(2, 4),), {})
    assert "dtype float32 is not one of float16" in op_impl.rejects(args, False)
    half = op.arguments((torch.randn(2, 4).half(),), {"bias": torch.randn(4).half()})
    assert op_impl.rejects(half, False) == "'bias' must be None"
    assert op_impl.rejects(op.arguments((torch.randn(2, 4).half(),), {"mode": "b"}), False).startswith("'mode'='b'")
    assert op_impl.rejects(op.arguments((torch.randn(2, 4).half(),), {}), False) is None
    assert impl is not None


def test_shorthand_gates_become_the_same_objects():
    op = make()
    op.register("torch:short", lambda x, bias, mode: x, gates={"x": {torch.float16}, "bias": None, "mode": ("a",)})
    assert op["torch:short"].gates == {"x": dtypes(torch.float16), "bias": absent(), "mode": one_of("a")}


@pytest.mark.parametrize("gate", [set(), (), []])
def test_an_empty_gate_is_refused_at_registration(gate):
    op = make()
    with pytest.raises(ValueError, match="empty gate rejects every call"):
        op.register("torch:empty", lambda x, bias, mode: x, gates={"mode": gate})


def test_constructors_check_their_arguments():
    with pytest.raises(ValueError, match="one or more torch dtypes"):
        dtypes()
    with pytest.raises(ValueError, match="at least one admitted value"):
        one_of()


def test_no_grad_inputs_are_declared_refused_when_they_need_grad_and_left_out_of_the_check():
    from popcorn.bench.compare import check

    @register_kernel(compile=False)
    def toy_scaled(x: Float["... hidden"], scale: Float["hidden"]) -> Float["... hidden"]:
        """Scale.

        $$y = x s$$
        """
        return x * scale

    def detached(x, scale):  # like liger's rope: no gradient reaches the table
        return x * scale.detach()

    toy_scaled.register("torch:detached", detached, no_grad=("scale",))
    impl = toy_scaled["torch:detached"]
    x, s = torch.randn(3, 4, requires_grad=True), torch.randn(4)
    assert impl.rejects(toy_scaled.arguments((x, s), {}), True) is None
    reason = impl.rejects(toy_scaled.arguments((x, s.requires_grad_()), {}), True)
    assert reason.startswith("gives no gradient to scale")

    def draw(trial):
        g = torch.Generator().manual_seed(trial)
        return {"x": torch.randn(3, 4, generator=g), "scale": torch.randn(4, generator=g)}
    judged = check(toy_scaled.reference, detached, draw, trials=2, grad=True, frozen=impl.no_grad)
    assert judged.status == "pass" and set(judged.bwd) == {"x"}
    unjudged = check(toy_scaled.reference, detached, draw, trials=2, grad=True)
    assert unjudged.status == "fail" and "grad scale" in unjudged.reason
    with pytest.raises(ValueError, match="no_grad names tensor parameters"):
        toy_scaled.register("torch:bad", detached, no_grad=("nope",))
