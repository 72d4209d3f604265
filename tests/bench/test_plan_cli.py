"""`popcorn bench plan`, `bench fill --curves-only`, `bench check --include`: the fill conveniences."""

import os
import subprocess
import sys

import pytest

from popcorn.bench import store
from popcorn.bench.fill import REFERENCE_TIMEOUT, watchdog
from popcorn.bench.plan import Planned, build
from popcorn.kernels import OPS

from . import fill_ops
from .test_audit import curve_rows, row


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "popcorn.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_plan_lists_training_sized_rms_norm_cases_by_stratum():
    out = cli("bench", "plan", "rms_norm", "--device-memory", "141", "--stratum", "production-bfloat16-grad")
    assert out.returncode == 0, out.stderr
    assert "production-bfloat16-grad: " in out.stdout
    assert "normalized_shape=4096,batch=(65536,),bfloat16,eps=1e-06  [curve:production:...:bfloat16:base]" \
        in out.stdout
    assert "gated at plan time (pairs, per backend): torch 0, compile 0" in out.stdout


def test_plan_counts_the_pairs_static_gates_remove():
    out = cli("bench", "plan", "attn", "--device-memory", "141", "--summary", "--curves-only")
    assert out.returncode == 0, out.stderr
    gated = out.stdout.split("gated at plan time (pairs, per backend): ")[1]
    assert "sdpa:cudnn 0" not in gated and "torch 0" in gated  # cuDNN refuses fp32 cases before any tensor exists


def test_plan_with_points_is_the_fills_plan_and_totals_its_pairs():
    # `bench plan --points 2` shows what `bench fill --points 2` (the cheapest release fill) would measure
    from popcorn.bench.tasks import _plan_of

    out = cli("bench", "plan", "rms_norm", "softmax", "--device-memory", "141", "--points", "2", "--summary")
    assert out.returncode == 0, out.stderr
    budget = 141 * 2**30
    fills = {name: len(_plan_of(OPS[name], budget, None, False, None, points=2).cases)
             for name in ("rms_norm", "softmax")}
    full = len(_plan_of(OPS["softmax"], budget, None, True, None).cases)
    assert fills["softmax"] < full
    for name, n in fills.items():
        assert f"{name}: {n} planned cases" in out.stdout
    cases = sum(fills.values())
    pairs = sum(n * len(OPS[name].implementations) for name, n in fills.items())
    gated = sum(int(g.rsplit(" ", 1)[1]) for line in out.stdout.splitlines()
                if line.startswith("  gated at plan time (pairs, per backend): ")
                for g in line.split(": ", 1)[1].split(", "))
    assert f"2 ops: {cases} planned cases, {pairs - gated} case-backend pairs" in out.stdout


def test_watchdog_budgets_have_a_compile_floor_and_grow_with_the_case():
    op = OPS["rms_norm"]

    def planned(rows):
        return Planned(build(op, {"...": rows, "normalized_shape": 4096}, "float32", {"eps": 1e-6}, ()), True,
                       "production-float32-grad", "x")
    small, large = planned(16), planned(65536)
    assert watchdog(op, "torch", large, 300) == REFERENCE_TIMEOUT  # a slow reference is out of budget
    assert watchdog(op, "compile", small, 300) >= 300  # room for a first compile
    assert watchdog(op, "compile", large, 300) > watchdog(op, "compile", small, 300) + 60
    assert watchdog(op, "quack", small, 300) >= 900  # CuTe DSL compiles every GEMM autotune config first
    assert watchdog(op, "liger", small, 300) < 900
    sdpa = OPS["attn"]
    case = build(sdpa, {"batch": 1, "q_heads": 8, "kv_heads": 8, "seq": 128, "head_dim": 64}, "bfloat16",
                 {"is_causal": True, "scale": None}, ())
    p = Planned(case, True, "production-bfloat16-grad", "x")
    assert watchdog(sdpa, "sdpa:flash", p, 300) < 70  # nothing to compile: the reference's floor


def test_check_include_audits_shards_before_they_are_merged(tmp_path):
    env = {"POPCORN_STORE": str(tmp_path / "store")}
    shard = tmp_path / "shard"
    store.write(curve_rows() + [row(impl="torch")], root=shard)
    out = cli("bench", "check", "--release", "--include", str(shard), env=env)
    assert "1 included file(s)" in out.stdout
    # compile's curves pass; what the release still lacks are the library adapters' rows
    failing = {tuple(line.split()[1:4]) for line in out.stdout.splitlines() if line.startswith("FAIL")}
    libraries = [name for name in OPS["rms_norm"].implementations if name not in ("torch", "compile")]
    assert libraries and failing == {("rms_norm", lib, "missing") for lib in libraries}, out.stdout + out.stderr
    store.write([row(impl_hash="cccccccccccc", case_id="stale1")], root=tmp_path / "stale")
    bad = cli("bench", "check", "--include", str(tmp_path / "stale"), env=env)
    assert bad.returncode == 1 and "stale" in bad.stdout
    assert not (tmp_path / "store").exists()  # auditing never writes the store
    missing = cli("bench", "check", "--include", str(tmp_path / "nope"), env=env)
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_fill_curves_only_and_the_all_cached_hint(tmp_path, monkeypatch):
    import io

    from popcorn.bench.fill import fill

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")
    err = io.StringIO()
    first = fill([fill_ops.toy_scale], backends=["toy:good"], curves=True, limit=6, trials=1, device="cpu", out=err)
    assert first.measured == 12 and "every planned case is cached" not in err.getvalue()
    again = fill([fill_ops.toy_scale], backends=["toy:good"], curves=True, limit=6, trials=1, device="cpu", out=err)
    assert again.measured == 0 and "toy_scale: every planned case is cached; add --force to remeasure" in err.getvalue()


def test_gated_pairs_never_reach_the_worker(tmp_path, monkeypatch):
    from popcorn.bench.fill import fill

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    summary = fill([fill_ops.toy_scale], backends=["toy:gated"], limit=4, trials=1, device="cpu")
    counts = summary.counts[("toy_scale", "toy:gated")]
    assert counts == {"gated": 4}
    assert {r.impl for r in store.read("toy_scale")} == {"torch"}
    assert "gated" in summary.table().splitlines()[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_forward_only_backend_is_measured_forward_on_gradient_cases(tmp_path, monkeypatch, workers):
    from popcorn.bench.fill import fill

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    summary = fill([fill_ops.toy_scale], backends=["toy:fwd"], limit=3, trials=2, device="cpu", workers=workers)
    assert summary.counts[("toy_scale", "toy:fwd")] == {"pass": 3}
    rows = store.read("toy_scale")
    ref = {r.case_id: r for r in rows if r.impl == "torch"}
    fwd = [r for r in rows if r.impl == "toy:fwd"]
    assert len(ref) == 3 and all(r.grad for r in ref.values())  # the plan's cases want gradients
    for r in fwd:
        assert not r.grad and r.fwd_ms and r.step_ms is None
        # the reference's forward time of the same case, not its backward
        assert r.ref_fwd_ms == ref[r.case_id].fwd_ms and r.ref_step_ms is None
    # a rerun finds the forward rows cached
    again = fill([fill_ops.toy_scale], backends=["toy:fwd"], limit=3, trials=2, device="cpu", workers=workers)
    assert again.counts[("toy_scale", "toy:fwd")] == {"cached": 3}
