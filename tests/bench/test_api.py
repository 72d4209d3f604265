"""op.validate / op.benchmark / bench mode against the real registry and user cache."""

import logging

import pytest
import torch

from popcorn.bench import report, store
from popcorn.core import Backend, Float, declare_backend, register_kernel
from popcorn.kernels import rms_norm


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("POPCORN_BENCH", raising=False)
    return tmp_path


def toy_op():
    @register_kernel(compile=False)
    def scale2(x: Float["... hidden"], alpha: float = 2.0) -> Float["... hidden"]:
        """Scale by alpha.

        $$y = \\alpha x$$
        """
        return alpha * x

    calls = []

    declare_backend(Backend("toy", None))  # a family that ships with torch, so it is always installed

    @scale2.register("toy:good")
    def scale2_good(x, alpha):
        calls.append("good")
        return x * alpha

    scale2.register("toy:wrong", lambda x, alpha: x * alpha + 0.5)
    scale2.register("toy:boom", lambda x, alpha: (_ for _ in ()).throw(RuntimeError("kernel exploded")))
    scale2.calls = calls
    return scale2


def test_benchmark_returns_one_record_per_eligible_backend_and_caches_them(caplog):
    op = toy_op()
    x = torch.randn(4, 16, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="popcorn.bench"):
        rows = op.benchmark(x, trials=3)
    by = {r.impl: r for r in rows}
    assert set(by) == {"toy:good", "toy:wrong", "toy:boom"}
    assert by["toy:good"].status == "pass" and by["toy:good"].fwd_ms > 0 and by["toy:good"].bwd_ms > 0
    assert by["toy:good"].ref_fwd_ms > 0 and by["toy:good"].reps == 3 and by["toy:good"].grad
    assert by["toy:wrong"].status == "fail" and "err" in by["toy:wrong"].reason
    assert by["toy:boom"].status == "crash" and by["toy:boom"].reason == "RuntimeError: kernel exploded"
    assert by["toy:wrong"].fwd_ms is None  # never timed after a failure
    cached = {r.impl for r in store.read("scale2")}
    assert cached == {"torch", "toy:good", "toy:wrong", "toy:boom"}
    lines = [r.getMessage() for r in caplog.records if r.name == "popcorn.bench"]
    assert len(lines) == 4 and any(l.startswith("scale2:toy:boom ") and "crash" in l for l in lines)
    assert report(by["toy:good"]).startswith("toy:good torch ")


def test_validate_does_not_time():
    op = toy_op()
    rows = op.validate(torch.randn(3, 8), trials=2)
    assert all(r.fwd_ms is None for r in rows)
    assert {r.impl: r.status for r in rows}["toy:good"] == "pass"


def test_rms_norm_benchmark_records_case_and_fingerprints():
    x, w = torch.randn(8, 64), torch.randn(64)
    (row,) = rms_norm.benchmark(x, w, trials=2)
    assert row.impl == "compile" and row.status == "pass", row.reason
    assert row.case == "normalized_shape=64,batch=(8,),float32,eps=1e-06"
    assert row.ref_hash == rms_norm.ref_hash and row.impl_hash == rms_norm["compile"].impl_hash
    assert row.timer == "cpu" and not row.grad and row.bwd_ms is None


def test_bench_mode_measures_a_missing_case_once():
    op = toy_op()
    x = torch.randn(2, 8)
    y = op(x, bench=True)
    assert torch.equal(y, 2 * x)
    assert {r.impl for r in store.read("scale2")} == {"torch", "toy:good", "toy:wrong", "toy:boom"}
    before = sorted(r.to_json() for r in store.read("scale2"))
    op(x, bench=True)  # cached now: nothing is measured again
    assert sorted(r.to_json() for r in store.read("scale2")) == before


def test_env_switch_turns_bench_mode_on(monkeypatch):
    op = toy_op()
    monkeypatch.setenv("POPCORN_BENCH", "1")
    op(torch.randn(2, 8))
    assert store.read("scale2")
    monkeypatch.setenv("POPCORN_BENCH", "0")


def test_mixed_dtypes_cannot_be_benchmarked():
    from popcorn.core import DispatchError
    with pytest.raises(DispatchError, match="one float dtype"):
        rms_norm.benchmark(torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8))


def test_bench_mode_runs_a_mixed_precision_call_and_says_once_why_it_is_not_measured(caplog, monkeypatch):
    x, w = torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(16)
    with caplog.at_level(logging.WARNING, logger="popcorn.bench"):
        y = rms_norm(x, w, bench=True)
        monkeypatch.setenv("POPCORN_BENCH", "1")
        rms_norm(x, w)
    torch.testing.assert_close(y, rms_norm.reference(x, w))
    said = [r.getMessage() for r in caplog.records if "does not measure" in r.getMessage()]
    assert len(said) == 1 and "mix dtypes (bfloat16, float32)" in said[0]
    assert store.read("rms_norm") == []


def test_bench_mode_leaves_the_slow_path_once_the_case_has_evidence(monkeypatch):
    import popcorn.bench.api as api

    op = toy_op()
    ensured = []
    real = api.ensure
    monkeypatch.setattr(api, "ensure", lambda o, a, k: ensured.append(o.arguments(a, k)["x"]) or real(o, a, k))
    x = torch.randn(4, 8)
    for _ in range(5):
        torch.testing.assert_close(op(x, bench=True), 2 * x)
    assert len(ensured) == 1  # measured once; later bench-mode calls are a lookup
    assert {r.impl for r in store.read("scale2")} >= {"torch", "toy:good"}
    op(torch.randn(2, 8))  # a plain call of a new signature: memoized without measuring
    monkeypatch.setenv("POPCORN_BENCH", "1")
    op(torch.randn(3, 8))  # a new case after the flag was set: measured
    assert len(ensured) == 2 and tuple(ensured[-1].shape) == (3, 8)
    op(torch.randn(3, 8))
    assert len(ensured) == 2
