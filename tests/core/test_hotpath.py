"""The generated call path: one key per call however it is spelled, errors worded by the op, and
memoized decisions that run the chosen implementation directly."""

import pytest
import torch

import popcorn
from popcorn.core import Backend, DispatchError, Float, declare_backend, register_kernel
from popcorn.core import hotpath


@pytest.fixture(autouse=True)
def no_evidence(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_REPORT", str(tmp_path / "no-report"))


def make_op(compile=False):
    @register_kernel(compile=compile)
    def scale(x: Float["... hidden"], bias: Float["hidden"] | None = None, eps: float = 1e-6) -> Float["... hidden"]:
        """Scale x.

        $$y = 2x + b$$
        """
        return 2 * x + (bias if bias is not None else 0)
    return scale


def test_positional_and_keyword_calls_share_one_decision():
    op = make_op()
    x = torch.randn(4, 8)
    for call in (lambda: op(x), lambda: op(x, None, 1e-6), lambda: op(x=x, eps=1e-6), lambda: op(x, bias=None)):
        torch.testing.assert_close(call(), 2 * x)
    assert len(op._memo) == 1
    op(x, eps=1e-5)
    op(x, torch.ones(8))
    op(x.double())
    assert len(op._memo) == 4


def test_bad_calls_are_named_by_the_op():
    op = make_op()
    x = torch.randn(4, 8)
    with pytest.raises(DispatchError, match=r"scale\(.*missing a required argument: 'x'"):
        op()
    with pytest.raises(DispatchError, match="missing a required argument: 'x'"):
        op(eps=1e-5)
    with pytest.raises(DispatchError, match="too many positional arguments"):
        op(x, None, 1e-6, 7)
    with pytest.raises(DispatchError, match="unexpected keyword argument 'nope'"):
        op(x, nope=1)
    with pytest.raises(DispatchError, match="x"):
        op(3.0)  # not a tensor: the key cannot be read, the slow path says what is wrong


def test_positional_only_parameters_are_refused_at_registration():
    def f(x: Float["n"], /) -> Float["n"]:
        """Summary.\n\n$$y=x$$"""
        return x
    with pytest.raises(ValueError, match="positional-only"):
        register_kernel(f, compile=False)


def test_a_compile_decision_memoizes_the_compiled_function():
    op = make_op(compile=True)
    x = torch.randn(4, 8)
    with popcorn.use("compile"):
        first = op(x)
        (chosen,) = [fn for key, fn in op._memo.items() if key[0]]
        assert chosen is not op["compile"].fn and chosen in op["compile"].fn.runner.cache.values()
        torch.testing.assert_close(op(x), first)  # the hot path calls the compiled function positionally
        torch.testing.assert_close(op(x, torch.ones(8)), 2 * x + 1)
    torch.testing.assert_close(first, 2 * x)


def test_a_source_implementation_is_memoized_and_called_positionally():
    declare_backend(Backend("toy", None))

    @register_kernel(compile=False)
    def plus(x: Float["n"], y: Float["n"]) -> Float["n"]:
        """Add.\n\n$$z = x + y$$"""
        return x + y
    plus.register("toy:add", source="torch:add")
    x, y = torch.randn(5), torch.randn(5)
    with popcorn.use("toy:add"):
        torch.testing.assert_close(plus(x, y), x + y)
        torch.testing.assert_close(plus(y=y, x=x), x + y)
    assert torch.add in plus._memo.values()


def test_scopes_are_counted_and_memoized_per_preference():
    op = make_op()
    op.register("toy:one", lambda x, bias, eps: 3 * x)
    x = torch.randn(2, 8)
    assert hotpath.SCOPES == 0
    with popcorn.use("toy:one"):
        with popcorn.use("torch"):
            assert hotpath.SCOPES == 2
            torch.testing.assert_close(op(x), 2 * x)
        torch.testing.assert_close(op(x), 3 * x)
        torch.testing.assert_close(op(x), 3 * x)  # memoized under this scope's preference
    assert hotpath.SCOPES == 0
    torch.testing.assert_close(op(x), 2 * x)
    assert len(op._memo) == 3
