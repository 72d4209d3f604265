import pytest
import torch

from popcorn.core import DispatchError, Float, Half, Int, F32
from popcorn.core.shapes import Token, bind


def specs(**kw):
    return kw


def test_binds_names_batch_and_dtype():
    s = specs(x=Float["... normalized_shape"], w=Float["normalized_shape"])
    b = bind("op", s, {"x": torch.randn(2, 3, 8), "w": torch.randn(8)})
    assert b.dims == {"normalized_shape": 8}
    assert b.batch == (2, 3)
    assert b.dtype == torch.float32


def test_empty_batch_and_literal():
    b = bind("op", specs(x=Float["... 4 hidden"]), {"x": torch.randn(4, 5)})
    assert b.batch == () and b.dims == {"hidden": 5}
    with pytest.raises(DispatchError, match="dim 4 is fixed, got size 3"):
        bind("op", specs(x=Float["... 4 hidden"]), {"x": torch.randn(3, 5)})


def test_same_name_conflict_names_argument_dim_and_sizes():
    with pytest.raises(DispatchError) as e:
        bind("rms_norm", specs(x=Float["... normalized_shape"], weight=Float["normalized_shape"]),
             {"x": torch.randn(4, 8), "weight": torch.randn(7)})
    msg = str(e.value)
    assert "'weight'" in msg and "normalized_shape" in msg and "7" in msg and "8" in msg


def test_batch_mismatch():
    s = specs(a=Float["... d"], b=Float["... d"])
    with pytest.raises(DispatchError, match=r"'\.\.\.'=\[3\].*'\.\.\.'=\[2\]"):
        bind("op", s, {"a": torch.randn(2, 4), "b": torch.randn(3, 4)})


def test_rank_errors():
    with pytest.raises(DispatchError, match="needs 2"):
        bind("op", specs(x=Float["a b"]), {"x": torch.randn(2, 3, 4)})
    with pytest.raises(DispatchError, match="at least 2"):
        bind("op", specs(x=Float["... a b"]), {"x": torch.randn(2)})


@pytest.mark.parametrize("token,base,size", [("head_dim/2", 8, 4), ("seq+1", 5, 6), ("seq-1", 5, 4), ("seq*k", 5, 15)])
def test_derived_tokens_check_and_invert(token, base, size):
    name = Token.parse(token).base
    s = {"a": Float[name], "b": Float[token]}
    args = {"a": torch.randn(base), "b": torch.randn(size), "k": 3}
    assert bind("op", s, args).dims[name] == base
    # the derived tensor first: its base is still checked once the plain name binds
    s2 = {"b": Float[token], "a": Float[name]}
    assert bind("op", s2, args).dims[name] == base
    with pytest.raises(DispatchError, match="must be"):
        bind("op", s, {**args, "b": torch.randn(size + 1)})


def test_derived_token_inverts_when_alone():
    b = bind("op", {"cu": Int["boundaries+1"]}, {"cu": torch.zeros(5, dtype=torch.long)})
    assert b.dims == {"boundaries": 4}


def test_derived_needs_int_scalar():
    with pytest.raises(DispatchError, match="needs an int 'k'"):
        bind("op", {"a": Float["seq*k"]}, {"a": torch.randn(4), "k": 1.5})


def test_dtype_gates():
    with pytest.raises(DispatchError, match="'x' has dtype float32, but Half"):
        bind("op", {"x": Half["a"]}, {"x": torch.randn(3)})
    bind("op", {"x": Half["a"]}, {"x": torch.randn(3, dtype=torch.bfloat16)})
    with pytest.raises(DispatchError, match="admits float32, float64"):
        bind("op", {"x": F32["a"]}, {"x": torch.randn(3, dtype=torch.float16)})
    with pytest.raises(DispatchError, match="dtype float32, but Int"):
        bind("op", {"i": Int["a"]}, {"i": torch.randn(3)})


def test_optional_and_required():
    s = {"x": Float["a"], "bias": Float["a"] | None}
    assert bind("op", s, {"x": torch.randn(3), "bias": None}).dims == {"a": 3}
    with pytest.raises(DispatchError, match="'x' is required"):
        bind("op", s, {"x": None, "bias": None})
    with pytest.raises(DispatchError, match="must be a tensor"):
        bind("op", s, {"x": [1.0, 2.0], "bias": None})


def test_mixed_float_dtypes_bind_without_case_dtype():
    b = bind("op", {"x": Float["a"], "w": Float["a"]},
             {"x": torch.randn(3, dtype=torch.bfloat16), "w": torch.randn(3)})
    assert b.dtype is None


@pytest.mark.parametrize("bad", ["a ...", "a+b+c", "2x", "a%2"])
def test_bad_annotations_fail_at_definition(bad):
    with pytest.raises(ValueError):
        Float[bad]
