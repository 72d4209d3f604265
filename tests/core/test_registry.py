import inspect
from typing import Literal

import pytest
import torch

from popcorn.core import HALF, Backend, BackendUnavailable, DispatchError, Float, Int, declare_backend, register_kernel


def make_op(**kw):
    @register_kernel(args={"eps": [1e-6, 1e-5]}, tags=("normalization",), compile=False, **kw)
    def toy(x: Float["... hidden"], bias: Float["hidden"] | None = None, eps: float = 1e-6,
            mode: Literal["a", "b"] = "a", flag: bool = False) -> Float["... hidden"]:
        """Toy op that scales its input.

        $$y = 2x + b$$

        [A paper](https://example.org/paper)
        """
        return 2 * x + (bias if bias is not None else 0)
    return toy


def test_called_like_the_reference():
    op = make_op()
    sig = inspect.signature(op)
    assert list(sig.parameters) == ["x", "bias", "eps", "mode", "flag", "backend", "bench"]
    assert sig.parameters["backend"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["eps"].default == 1e-6
    assert op.__doc__.startswith("Toy op") and op.__name__ == "toy"
    x = torch.randn(2, 3)
    assert torch.equal(op(x), 2 * x)
    assert torch.equal(op(x, None, 1e-5, mode="b"), 2 * x)
    with pytest.raises(DispatchError, match="unexpected keyword"):
        op(x, nope=1)


def test_metadata_and_pools():
    op = make_op()
    assert op.summary == "Toy op that scales its input."
    assert op.math == "y = 2x + b"
    assert op.citations == (("A paper", "https://example.org/paper"),)
    assert op.tags == ("normalization",)
    assert op.arg_pools == {"eps": (1e-6, 1e-5), "mode": ("a", "b"), "flag": (False, True)}
    assert op.optional == ("bias",)
    assert [repr(s) for s in op.outputs] == ['Float["... hidden"]']


def test_bad_docstring_and_tags_fail_at_registration():
    def f(x: Float["a"]) -> Float["a"]:
        """no period and no math"""
        return x
    with pytest.raises(ValueError, match="one-line summary"):
        register_kernel(f, compile=False)
    f.__doc__ = "Fine summary."
    with pytest.raises(ValueError, match=r"\$\$"):
        register_kernel(f, compile=False)
    f.__doc__ = "Fine summary.\n\n$$y=x$$"
    with pytest.raises(ValueError, match="unknown tags"):
        register_kernel(f, tags=("nonsense",), compile=False)


def test_register_adapter_gates_predicate_forward_only():
    op = make_op()
    calls = []

    @op.register("liger", gates={"x": HALF, "bias": None, "mode": {"a"}}, predicate=lambda **a: not a["flag"])
    def toy_liger(x, bias, eps, mode, flag):
        calls.append(1)
        return 2 * x

    op.register("fla", lambda x, bias, eps, mode, flag: 2 * x, forward_only=True)
    assert list(op.implementations) == ["torch", "liger", "fla"]
    xh = torch.randn(2, 3, dtype=torch.bfloat16)
    declare_backend(Backend("liger", "liger-kernel", "liger_kernel", ">=0.8,<0.9", "liger"))
    if not op["liger"].available:
        with pytest.raises(BackendUnavailable, match=r"pip install 'popcorn\[liger\]'"):
            op(xh, backend="liger")
        return
    op(xh, backend="liger")
    assert calls == [1]
    for bad, why in [((torch.randn(2, 3),), "dtype float32 is not one of bfloat16, float16"),
                     ((xh, torch.randn(3, dtype=torch.bfloat16)), "'bias' must be None"),
                     ((xh, None, 1e-6, "b"), "'mode'='b' is not one of"),
                     ((xh, None, 1e-6, "a", True), "predicate")]:
        with pytest.raises(DispatchError, match=why):
            op(*bad, backend="liger")


def test_forward_only_rejects_grad():
    op = make_op()
    op.register("compile", lambda x, bias, eps, mode, flag: 2 * x, forward_only=True)
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(DispatchError, match="no backward"):
        op(x, backend="compile")
    with torch.no_grad():
        op(x, backend="compile")


def test_missing_package_names_the_extra():
    declare_backend(Backend("nopkg", "popcorn-no-such-package", None, ">=1", "nopkg"))
    op = make_op()
    op.register("nopkg", source="popcorn_no_such_package:fn")
    assert op.available_backends() == ["torch"]
    with pytest.raises(BackendUnavailable, match=r"pip install 'popcorn\[nopkg\]'"):
        op(torch.randn(2), backend="nopkg")


def test_a_missing_submodule_package_is_missing_not_an_import_error():
    # fa4's module is flash_attn.cute: finding it must not raise where flash_attn itself is absent
    b = Backend("nested", "popcorn-no-such-package", "popcorn_no_such_parent.cute", ">=1", "nested")
    assert b.version is None
    assert "'popcorn-no-such-package', which is not installed" in b.problem()


def test_version_outside_range_is_unavailable():
    b = Backend("torchpin", "torch", "torch", "<1.0", "torchpin")
    assert "supports torch<1.0" in b.problem()


def test_registration_errors():
    op = make_op()
    with pytest.raises(ValueError, match="already registered"):
        op.register("torch", lambda x, bias, eps, mode, flag: x)
    with pytest.raises(ValueError, match="must be the reference's"):
        op.register("fla", lambda x, eps: x)
    with pytest.raises(ValueError, match="gate on unknown parameter"):
        op.register("fla", lambda x, bias, eps, mode, flag: x, gates={"y": None})
    with pytest.raises(ValueError, match="no declared backend family"):
        op.register("mystery", lambda x, bias, eps, mode, flag: x)
    with pytest.raises(ValueError, match="bad implementation name"):
        op.register("Bad Name", lambda x, bias, eps, mode, flag: x)
    with pytest.raises(DispatchError, match="has no backend 'nope'"):
        op(torch.randn(2), backend="nope")


def test_source_binding_is_called_positionally():
    op = make_op()
    op.register("fla:recurrent", source="torch:add")  # torch.add(x, bias, eps...) would misbehave; check lazy import
    assert op["fla:recurrent"].backend.name == "fla"


def test_scalar_without_default_is_rejected():
    def f(x: Float["a"], n: int) -> Float["a"]:
        """Summary.\n\n$$y=x$$"""
        return x
    with pytest.raises(ValueError, match="neither an annotated tensor nor a scalar"):
        register_kernel(f, compile=False)


def test_int_inputs_need_a_domain():
    from popcorn.core import Case
    from popcorn.core.inputs import make_inputs

    @register_kernel(compile=False)
    def pick(x: Float["tokens hidden"], idx: Int["tokens"]) -> Float["tokens"]:
        """Pick.\n\n$$y=x_i$$"""
        return x.gather(1, idx[:, None])[:, 0]
    with pytest.raises(ValueError, match="needs a domain"):
        make_inputs(pick, Case({"tokens": 3, "hidden": 4}))


def test_a_memoized_call_that_raises_runs_once_and_propagates():
    calls = []

    @register_kernel(compile=False)
    def picky(x: Float["hidden"]) -> Float["hidden"]:
        """Raise on the second call.

        $$y = x$$
        """
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("from the kernel")
        return x

    x = torch.randn(3)
    picky(x)  # decides and memoizes
    with pytest.raises(KeyError, match="from the kernel"):
        picky(x)
    assert len(calls) == 2  # not rerun through the slow path


def test_asking_for_a_library_without_an_adapter_says_so_instead_of_an_install_hint():
    from popcorn.kernels import rms_norm, swish

    with pytest.raises(DispatchError) as e:
        swish(torch.randn(2, 8), backend="liger")  # liger has no swish kernel
    assert "no liger adapter for swish" in str(e.value) and "pip install" not in str(e.value)
    with pytest.raises(DispatchError, match="no backend 'nonsense'; registered: torch, compile"):
        rms_norm(torch.randn(2, 8), torch.randn(8), backend="nonsense")


def test_batch_names_a_vocabulary_entry_of_an_op_with_a_leading_batch():
    with pytest.raises(ValueError, match="batch="):
        make_op(batch="tokens")

    def plain(x: Float["n"]) -> Float["n"]:
        """Plain.

        $$y = x$$
        """
        return x
    with pytest.raises(ValueError, match="batch="):
        register_kernel(plain, batch="token_rows", compile=False)
    assert make_op(batch="token_rows").batch == "token_rows"
