"""Dispatch decisions on crafted evidence in a real user cache, through real op calls."""

import json
import warnings

import pytest
import torch

import popcorn
from popcorn.bench import store
from popcorn.bench.api import device_name
from popcorn.bench.record import Record
from popcorn.core import Backend, Case, Float, declare_backend, register_kernel
from popcorn.dispatch import evidence

HERE = device_name(torch.device("cpu"))


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_REPORT", str(tmp_path / "no-report"))  # no published evidence
    monkeypatch.delenv("POPCORN_BENCH", raising=False)
    evidence.reset()
    yield
    evidence.reset()


def make_op(batch="..."):
    declare_backend(Backend("toy", None))

    @register_kernel(compile=False, batch=batch)
    def toy_norm(x: Float["... hidden"], eps: float = 1e-6) -> Float["... hidden"]:
        """Scale x.

        $$y = 2x$$
        """
        ran.append("torch")
        return 2 * x

    ran = []

    def adapter_for(name):
        def adapter(x, eps):
            ran.append(name)
            return 2 * x
        return adapter

    for name in ("toy:fast", "toy:slow", "toy:fwd"):
        toy_norm.register(name, adapter_for(name), forward_only=name == "toy:fwd")
    toy_norm.ran = ran
    return toy_norm


def row(op, impl, hidden, *, status="pass", fwd=1.0, ref=2.0, step=None, ref_step=None, grad=False, torch_version=None,
        device=HERE, batch=(4,), ts="2026-12-01T00:00:00+00:00"):
    case = Case({"hidden": hidden}, batch, "float32", {"eps": 1e-6})
    return Record(op=op.name, impl=impl, case_id=case.case_id, case=case.label, config=json.dumps(case.config()),
                  device=device, torch=torch_version or torch.__version__, backend_version=None,
                  ref_hash=op.ref_hash, impl_hash=op[impl].impl_hash, status=status, grad=grad,
                  reason=None if status == "pass" else "boom", fwd_ms=fwd if status == "pass" else None,
                  ref_fwd_ms=ref, step_ms=step, ref_step_ms=ref_step or (2 * step if step else None), ts=ts)


def last(op, x):
    op.ran.clear()
    op(x)
    return op.ran[-1]


def test_fastest_measured_backend_wins_at_the_nearest_record():
    op = make_op()
    store.write([row(op, "toy:fast", 32, fwd=1.0), row(op, "toy:fast", 128, fwd=1.0),
                 row(op, "toy:slow", 32, fwd=1.5), row(op, "toy:slow", 128, fwd=1.5)])
    assert last(op, torch.randn(4, 60)) == "toy:fast"


def test_nearest_neighbour_decides_when_rankings_cross():
    op = make_op()
    # fast wins at small sizes, slow at large ones
    store.write([row(op, "toy:fast", 32, fwd=0.5), row(op, "toy:fast", 4096, fwd=4.0),
                 row(op, "toy:slow", 32, fwd=1.0), row(op, "toy:slow", 4096, fwd=1.0)])
    assert last(op, torch.randn(4, 40)) == "toy:fast"
    assert last(op, torch.randn(4, 3000)) == "toy:slow"


def test_reference_stays_within_the_band():
    op = make_op()
    store.write([row(op, "toy:fast", 32, fwd=1.0, ref=1.02), row(op, "toy:fast", 128, fwd=1.0, ref=1.02)])
    assert last(op, torch.randn(4, 64)) == "torch"


def test_an_exact_failure_blocks_the_backend():
    op = make_op()
    store.write([row(op, "toy:fast", 32), row(op, "toy:fast", 128), row(op, "toy:fast", 64, status="fail"),
                 row(op, "toy:slow", 32, fwd=1.5), row(op, "toy:slow", 128, fwd=1.5)])
    assert last(op, torch.randn(4, 64)) == "toy:slow"
    assert "failed on this exact case" in popcorn.explain(op, torch.randn(4, 64))


def test_validity_region_range_and_divisibility():
    op = make_op()
    store.write([row(op, "toy:fast", h) for h in (32, 64, 128)] + [row(op, "toy:fast", 33, status="crash")])
    assert last(op, torch.randn(4, 96)) == "toy:fast"  # inside [32, 128], a multiple of 32
    assert last(op, torch.randn(4, 1024)) == "torch"  # outside the measured range
    assert last(op, torch.randn(4, 48)) == "torch"  # off the multiples it only passed on
    assert "not a multiple of 32" in popcorn.explain(op, torch.randn(4, 48))


def test_a_failure_inside_the_range_is_a_hole_around_it():
    op = make_op()
    store.write([row(op, "toy:fast", h) for h in (32, 128, 1024)] + [row(op, "toy:fast", 512, status="fail")])
    assert last(op, torch.randn(4, 100)) == "toy:fast"  # nearest record 128 passed
    assert last(op, torch.randn(4, 480)) == "torch"  # nearest record 512 failed
    assert "in a hole of its validity region" in popcorn.explain(op, torch.randn(4, 480))


def test_no_evidence_means_the_reference():
    op = make_op()
    assert last(op, torch.randn(4, 64)) == "torch"
    assert "no evidence" in popcorn.explain(op, torch.randn(4, 64))


def test_forward_only_backend_is_not_chosen_when_autograd_needs_it():
    op = make_op()
    store.write([row(op, "toy:fwd", h, fwd=0.1) for h in (32, 128)] +
                [row(op, "toy:fwd", h, fwd=0.1, step=0.1, grad=True) for h in (32, 128)])
    assert last(op, torch.randn(4, 64)) == "toy:fwd"
    assert last(op, torch.randn(4, 64, requires_grad=True)) == "torch"


def test_gradient_rows_rank_forward_only_calls_by_their_forward_time():
    op = make_op()
    # fills measure in gradient mode: fast's forward is quicker, slow's whole step is
    store.write([row(op, impl, h, fwd=fwd, ref=2.0, step=step, ref_step=4.0, grad=True)
                 for h in (32, 128) for impl, fwd, step in (("toy:fast", 0.5, 3.0), ("toy:slow", 1.5, 1.0))])
    assert last(op, torch.randn(4, 64)) == "toy:fast"
    assert last(op, torch.randn(4, 64, requires_grad=True)) == "toy:slow"
    # a forward-only row of the call's own mode outranks gradient rows of the same backend
    store.write([row(op, "toy:slow", h, fwd=0.1) for h in (32, 128)])
    assert last(op, torch.randn(4, 64)) == "toy:slow"


def test_other_torch_version_still_ranks_with_a_warning():
    op = make_op()
    store.write([row(op, "toy:fast", h, torch_version="2.11.0") for h in (32, 128)])
    with pytest.warns(UserWarning, match="torch 2.11.0"):
        assert last(op, torch.randn(4, 64)) == "toy:fast"


def test_new_evidence_invalidates_the_memo():
    op = make_op()
    x = torch.randn(4, 64)
    assert last(op, x) == "torch"
    store.write([row(op, "toy:fast", h) for h in (32, 128)])
    assert last(op, x) == "toy:fast"


def test_use_scopes_a_preference_and_backend_forces():
    op = make_op()
    store.write([row(op, "toy:fast", h) for h in (32, 128)])
    x = torch.randn(4, 64)
    with popcorn.use("toy:slow"):
        assert last(op, x) == "toy:slow"
    assert last(op, x) == "toy:fast"
    op.ran.clear()
    op(x, backend="torch")
    assert op.ran == ["torch"]


def test_sibling_device_rows_rank_but_cpu_never_borrows_gpu_evidence():
    op = make_op()
    store.write([row(op, "toy:fast", h, device="NVIDIA H200") for h in (32, 128)])
    assert last(op, torch.randn(4, 64)) == "torch"
    store.write([row(op, "toy:slow", h, device="cpu:other", fwd=0.5) for h in (32, 128)])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert last(op, torch.randn(4, 64)) == "toy:slow"
    assert any("cpu:other" in str(m.message) for m in w)


def test_publishing_a_report_changes_decisions(tmp_path, monkeypatch):
    from popcorn.bench.delta import ReportStore
    from popcorn.bench.publish import publish

    op = make_op()
    x = torch.randn(4, 64)
    assert last(op, x) == "torch"
    report = ReportStore(str(tmp_path / "store"))
    report.merge([row(op, "toy:slow", h) for h in (32, 128)])
    out = tmp_path / "published"
    monkeypatch.setenv("POPCORN_REPORT", str(out))
    publish(report, {op.name: op}, out, force=True)
    assert last(op, x) == "toy:slow"


def test_explain_names_what_runs_under_use_and_backend_and_how_to_get_evidence(tmp_path, monkeypatch):
    import popcorn
    from popcorn.kernels import rms_norm

    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POPCORN_REPORT", str(tmp_path / "none"))
    popcorn.dispatch.forget()
    x, w = torch.randn(4, 16), torch.randn(16)
    plain = popcorn.explain(rms_norm, x, w)
    assert plain.startswith("runs torch (popcorn's pure-PyTorch reference)")
    assert "bench=True" in plain and "popcorn bench fill rms_norm" in plain
    with popcorn.use("compile"):
        scoped = popcorn.explain(rms_norm, x, w)
    assert scoped.startswith("runs compile: preferred by popcorn.use('compile')")
    forced = popcorn.explain(rms_norm, x, w, backend="compile")
    assert forced.startswith("runs compile: forced by backend='compile'")
    with pytest.raises(ValueError, match="unknown backend 'tourch' \\(did you mean 'torch'\\?\\)"):
        with popcorn.use("tourch"):
            pass


def test_eager_calls_rank_by_host_time_where_it_dominates_and_compiled_calls_by_device_time():
    from popcorn.dispatch.decide import decide

    op = make_op()
    rows = []
    for hidden in (32, 128):
        # toy:fast is 4x faster on the device but costs 200 us of host time per call (guards, a compiled
        # callable's runtime); the reference's kernels take 50 us to launch
        rows += [row(op, "toy:fast", hidden, fwd=0.01), row(op, "torch", hidden, fwd=0.04)]
        rows[-2].host_us, rows[-1].host_us = 200.0, 50.0
    store.write(rows)
    x = torch.randn(4, 64)
    args = op.arguments((x,), {})
    assert decide(op, args, False).impl == "torch"  # eager: max(device, host) is 0.2 ms against 0.05 ms
    assert decide(op, args, False, graph=True).impl == "toy:fast"  # in a graph: 0.01 ms against 0.04 ms
    assert last(op, x) == "torch"
    text = popcorn.explain(op, x)
    assert "inside torch.compile (device time alone ranks there): runs toy:fast" in text
    assert "host 200 us" in text


def test_gradient_rows_without_a_step_host_time_fall_back_to_the_forward_host_time():
    from popcorn.dispatch.decide import decide

    op = make_op()
    rows = []
    for hidden in (32, 128):
        # measured before step_host_us existed: only the forward's host time is known
        rows += [row(op, "toy:fast", hidden, step=0.01, grad=True), row(op, "torch", hidden, step=0.04, grad=True)]
        rows[-2].host_us, rows[-1].host_us = 200.0, 50.0
    store.write(rows)
    args = op.arguments((torch.randn(4, 64, requires_grad=True),), {})
    assert decide(op, args, True).impl == "torch"  # the step pays at least its forward's 200 us
    assert decide(op, args, True, graph=True).impl == "toy:fast"


def test_a_row_wise_op_reads_rows_records_for_batch_by_sequence_calls():
    op = make_op(batch="token_rows")
    # the plan measures (rows, hidden); training calls (batch, seq, hidden) with the same rows
    store.write([row(op, "toy:fast", h, fwd=0.5, batch=(4096,)) for h in (32, 128)])
    assert last(op, torch.randn(2, 2048, 64)) == "toy:fast"
    assert last(op, torch.randn(64)) == "toy:fast"  # one row, no leading dims


def test_leading_dims_of_other_ops_keep_their_rank():
    op = make_op()
    store.write([row(op, "toy:fast", h, fwd=0.5, batch=(4096,)) for h in (32, 128)])
    assert last(op, torch.randn(2, 2048, 64)) == "torch"  # no evidence of rank 2


def test_a_missing_library_with_evidence_gets_one_notice_and_the_call_runs_elsewhere():
    import sys

    op = make_op()
    declare_backend(Backend("toymiss", "popcorn-toymiss-not-installed", "popcorn_toymiss", ">=1", "toymiss"))
    op.register("toymiss", lambda x, eps: 2 * x)
    store.write([row(op, "toymiss", 32, fwd=0.1), row(op, "toymiss", 128, fwd=0.1),
                 row(op, "toy:fast", 32, fwd=1.0), row(op, "toy:fast", 128, fwd=1.0)])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert last(op, torch.randn(4, 40)) == "toy:fast"  # the fastest installed backend
        assert last(op, torch.randn(4, 100)) == "toy:fast"
    notices = [str(w.message) for w in seen if "toymiss" in str(w.message)]
    assert len(notices) == 1, notices  # one per library, not per call
    assert "pip install 'popcorn[toymiss]'" in notices[0] and "passing on calls like this one" in notices[0]
    assert "popcorn_toymiss" not in sys.modules


def test_a_missing_library_without_evidence_says_nothing():
    op = make_op()
    declare_backend(Backend("toyabsent", "popcorn-toyabsent-not-installed", "popcorn_toyabsent", ">=1", "toyabsent"))
    op.register("toyabsent", lambda x, eps: 2 * x)
    store.write([row(op, "toy:fast", 32, fwd=1.0), row(op, "toy:fast", 128, fwd=1.0)])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert last(op, torch.randn(4, 40)) == "toy:fast"
    assert not [w for w in seen if "toyabsent" in str(w.message)]
