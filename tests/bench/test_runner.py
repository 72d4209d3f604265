"""Fill as tasks + runner + sinks: planning counts, pruning during the run, and rows landing in a shard
directory or the Delta store (never the user cache). The real worker runs on CPU with tiny ops."""

import io
import json
import os
import subprocess
import sys

import pytest
import torch

from popcorn.bench import store
from popcorn.bench.delta import ReportStore
from popcorn.bench.runner import run
from popcorn.bench.sinks import DeltaSink, ShardSink
from popcorn.bench.tasks import Skip, Task, Tasks, device_bytes, plan_tasks
from popcorn.bench.worker import row_from

from . import fill_ops
from .fill_ops import SLICE


@pytest.fixture(autouse=True)
def env(toy_cache):
    return toy_cache


def user_cache_untouched(tmp_path) -> bool:
    return not (tmp_path / "cache").exists()


def plan(cached=None, **kw):
    kw = {"slice_spec": SLICE, "device": "cpu", "trials": 1, **kw}
    return plan_tasks([fill_ops.toy_scale], cached, **kw)


def row(task: Task, status: str, **kw):
    r = row_from(fill_ops.toy_scale, task.impl, task.case, task.grad, status, "given", torch.device("cpu"))
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_planning_skips_cached_and_gated_pairs():
    fresh = plan(backends=["toy:good", "toy:gated"])
    cases = len(fresh.steps) // 3
    assert cases > 10 and [t.impl for t in fresh.todo[:2]] == ["torch", "toy:good"]
    assert len(fresh.todo) == 2 * cases and {(s.task.impl, s.why) for s in fresh.skipped} == {("toy:gated", "gated")}
    torch_tasks = [t for t in fresh.todo if t.impl == "torch"]
    good_tasks = [t for t in fresh.todo if t.impl == "toy:good"]
    held = [row(t, "pass", fwd_ms=1.0) for t in torch_tasks[:3]]
    held += [row(good_tasks[0], "oom"), row(good_tasks[1], "error"),  # an error row is measured again
             row(good_tasks[2], "pass"),  # an untimed pass too
             row(good_tasks[3], "fail", impl_hash="stale")]  # and a row of other code
    again = plan(lambda op, bad: held if op == "toy_scale" else [], backends=["toy:good", "toy:gated"])
    why = [(s.task.impl, s.why) for s in again.skipped]
    assert why.count(("torch", "cached")) == 3 and why.count(("toy:good", "cached")) == 1
    assert why.count(("toy:gated", "gated")) == cases and len(again.todo) == 2 * cases - 4
    forced = plan(lambda op, bad: held, backends=["toy:good", "toy:gated"], force=True)
    assert len(forced.todo) == 2 * cases


def test_strata_select_the_plan_cases_of_those_strata_and_limit_samples_among_them():
    whole = plan_tasks([fill_ops.toy_scale], device="cpu", trials=1, backends=["toy:good"])
    wanted = ["production-bfloat16-grad", "coverage-float16-grad"]
    chosen = plan_tasks([fill_ops.toy_scale], device="cpu", trials=1, backends=["toy:good"], strata=wanted)
    assert [(t.impl, t.case.case_id) for t in chosen.todo] == \
        [(t.impl, t.case.case_id) for t in whole.todo if t.stratum in wanted]  # plan order kept
    sampled = plan_tasks([fill_ops.toy_scale], device="cpu", trials=1, backends=["toy:good"],
                         strata=["production-bfloat16-grad"], limit=2)
    assert len(sampled.todo) == 4 and {t.stratum for t in sampled.todo} == {"production-bfloat16-grad"}
    out = io.StringIO()
    none = plan_tasks([fill_ops.toy_scale], device="cpu", backends=["toy:good"], strata=["long-float32-fwd"], out=out)
    assert not none.steps and "toy_scale: no planned case in long-float32-fwd on this device" in out.getvalue()
    with pytest.raises(ValueError, match="no op named here has stratum 'production-float64-grad'"):
        plan_tasks([fill_ops.toy_scale], device="cpu", strata=["production-float64-grad"])


def test_points_fill_each_curves_smallest_points_only():
    from popcorn.bench import plan as planning

    tasks = plan_tasks([fill_ops.toy_scale], device="cpu", trials=1, backends=["toy:good"], points=2)
    plan = planning.case_plan(fill_ops.toy_scale, device_bytes(torch.device("cpu")))
    want = {i for c in plan.curves for i in c.case_ids[:2]}
    assert {t.case.case_id for t in tasks.todo} == want and len(want) < len(plan.cases)


def test_a_backend_asked_for_but_not_installed_is_named_with_the_reason():
    from popcorn.kernels import OPS

    if OPS["rms_norm"]["quack"].backend.available:  # quack needs nvidia-cutlass-dsl: never in the dev install
        pytest.skip("quack-kernels is installed here")
    tasks = plan_tasks([OPS["rms_norm"]], device="cpu", backends=["quack"], limit=1, out=io.StringIO())
    assert [t.impl for t in tasks.todo] == ["torch"]
    assert "pip install 'popcorn[quack]'" in tasks.unavailable["quack"]


def test_cli_fill_names_an_unknown_stratum():
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--stratum", "bogus"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no op named here has stratum 'bogus'" in out.stderr


def test_the_all_cached_hint_and_unreadable_lines_are_named():
    out = io.StringIO()
    tasks = plan(backends=["toy:gated"])
    held = [row(t, "fail") for t in tasks.todo]
    bad_line = ("/x/toy_scale.jsonl", 3, "not JSON")
    plan(lambda op, bad: bad.append(bad_line) or held, backends=["toy:gated"], out=out)
    assert "toy_scale: every planned case is cached; add --force to remeasure" in out.getvalue()
    assert "skipped /x/toy_scale.jsonl:3 (not JSON)" in out.getvalue()


def test_a_cached_oom_prunes_dominated_tasks_without_starting_a_worker(tmp_path):
    tasks = plan(backends=["toy:good"])
    good = [t for t in tasks.todo if t.impl == "toy:good"]
    smallest = good[0]
    steps = [Skip(smallest, "cached", row(smallest, "oom"))] + good[1:]
    seen = []
    summary = run(Tasks(steps), ShardSink(tmp_path / "shards"), lambda task, r, s: seen.append((task, r)))
    assert summary.counts[("toy_scale", "toy:good")] == {"cached": 1, "pruned": len(good) - 1}
    assert summary.measured == 0 and seen == [(t, None) for t in good[1:]]
    assert not (tmp_path / "shards" / "toy_scale.jsonl").exists()


def test_run_writes_shards_and_a_rerun_skips_them(tmp_path):
    shards = ShardSink(tmp_path / "shards")
    seen = []
    tasks = plan(shards.cached, backends=["toy:good"], limit=3)
    summary = run(tasks, shards, lambda task, r, s: seen.append((task.impl, r.status)))
    assert summary.measured == 6 and seen == [("torch", "pass"), ("toy:good", "pass")] * 3
    files = store.jsonl_files([tmp_path / "shards"])  # what `popcorn bench merge DIR` reads
    assert files == [tmp_path / "shards" / "toy_scale.jsonl"]
    rows = store.read_file(files[0])
    assert len(rows) == 6 and {r.status for r in rows} == {"pass"}
    by_case = {(r.impl, r.case_id): r for r in rows}
    for (impl, case_id), r in by_case.items():  # backend rows carry the reference's times on the case
        if impl == "toy:good":
            assert r.ref_fwd_ms == by_case[("torch", case_id)].fwd_ms is not None
    assert user_cache_untouched(tmp_path)
    again = run(plan(shards.cached, backends=["toy:good"], limit=3), shards)
    assert again.measured == 0 and again.counts[("toy_scale", "toy:good")] == {"cached": 3}


def test_a_cached_reference_row_times_the_backend_rows_of_its_case(tmp_path):
    shards = ShardSink(tmp_path / "shards")
    run(plan(shards.cached, backends=["torch"], limit=2), shards)  # the reference alone, as a sweep's reference
    refs = {r.case_id: r for r in store.read("toy_scale", root=tmp_path / "shards")}
    summary = run(plan(shards.cached, backends=["toy:good"], limit=2), shards)
    assert summary.counts[("toy_scale", "torch")] == {"cached": 2} and summary.measured == 2
    good = [r for r in store.read("toy_scale", root=tmp_path / "shards") if r.impl == "toy:good"]
    assert len(good) == 2 and all(r.ref_fwd_ms == refs[r.case_id].fwd_ms is not None for r in good)


def test_run_merges_into_the_delta_store(tmp_path):
    sink = DeltaSink(str(tmp_path / "store"))
    summary = run(plan(sink.cached, backends=["toy:good"], limit=2), sink)
    assert summary.measured == 4
    rows = ReportStore(str(tmp_path / "store")).read("toy_scale")
    assert sorted(r.impl for r in rows) == ["torch", "torch", "toy:good", "toy:good"]
    assert user_cache_untouched(tmp_path)
    assert run(plan(sink.cached, backends=["toy:good"], limit=2), sink).measured == 0


def test_an_orphaned_sentinel_becomes_a_crash_row_in_its_own_sink(tmp_path):
    shards = ShardSink(tmp_path / "shards")
    task = plan(backends=["toy:good"]).todo[1]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a supervisor that no longer runs
    shards.sentinels.mkdir(parents=True)
    (shards.sentinels / f"sentinel-{gone.pid}-1.json").write_text(json.dumps(task.message()))
    assert run([], shards).measured == 0
    rows = store.read("toy_scale", root=tmp_path / "shards")
    assert [(r.impl, r.status) for r in rows] == [("toy:good", "crash")]
    assert not list(shards.sentinels.iterdir()) and user_cache_untouched(tmp_path)


def test_cli_fill_out_writes_shards_not_the_user_cache(env):
    # a slice at two rows keeps the two sampled cases small on CPU (the slice's points are of one stratum)
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--limit", "2",
                          "--backend", "torch", "--trials", "1", "--out", str(env / "shards"), "--slice",
                          "normalized_shape", "dtype=float32", "...=[2]", "eps=0.000001",
                          "--stratum", "production-float32-grad"],
                         capture_output=True, text=True, env={**os.environ, "POPCORN_CACHE_DIR": str(env / "cache")},
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "2 case-backend pairs measured" in out.stdout
    rows = store.read_file(env / "shards" / "rms_norm.jsonl")
    assert len(rows) == 2 and {(r.impl, r.status) for r in rows} == {("torch", "pass")}
    assert user_cache_untouched(env)
    summary = json.loads((env / "shards" / "fill-summary.json").read_text())  # what a sweep partition reports
    assert summary["measured"] == 2 and summary["counts"] == [{"op": "rms_norm", "impl": "torch", "pass": 2}]
    assert sorted(tuple(p) for p in summary["pairs"]) == sorted(("rms_norm", "torch", r.case_id, r.grad) for r in rows)
    assert store.jsonl_files([env / "shards"]) == [env / "shards" / "rms_norm.jsonl"]  # merge reads the shards alone


def test_only_the_first_interrupt_stops_a_fill_and_none_cuts_its_drain():
    # timeout(1) signals the command and then its whole process group: two SIGINTs a moment apart
    import signal

    from popcorn.bench.runner import interrupt_once
    with interrupt_once(signal.SIGINT) as fired:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):  # the handler runs between bytecodes
                pass
        os.kill(os.getpid(), signal.SIGINT)  # the second: ignored while the drain runs
        for _ in range(10**5):
            pass
        assert fired == [signal.SIGINT]
    with interrupt_once(signal.SIGINT) as fired:
        fired.append("draining")  # a fill that finished on its own: a first signal now is ignored too
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**5):
            pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_worker_gives_back_a_case_it_keeps_when_asked(tmp_path):
    # a case group whose last task is pruned never sends the task marked last: the slot asks the worker to
    # give the case's memory back before it unreserves, or the next case lent that memory runs out of it
    from popcorn.bench.worker import Worker

    task = plan(backends=["torch"]).todo[0]
    worker = Worker(torch.device("cpu"), tmp_path / "sentinels")
    try:
        row, ok, _ = worker.run({**task.message(), "last": False}, 120)
        assert ok and row["status"] == "pass"
        assert worker.footprint is None  # device memory is counted on CUDA alone
        assert worker.release_case() is True  # it kept the case (inputs, truths)
        assert worker.release_case() is False  # and kept nothing after
        row, ok, _ = worker.run({**task.message(), "last": True}, 120)
        assert worker.release_case() is False  # a task marked last gives it back by itself
    finally:
        worker.close()


def test_first_fit_passes_over_cases_above_a_slots_share_until_they_fit_or_are_all_that_is_left():
    from popcorn.bench.runner import first_fit

    assert first_fit([1, 50, 2], free=10, share=5) == 0  # plan order while cases are small
    assert first_fit([50, 2, 60], free=10, share=5) == 1  # a large case waits while a small one can go
    assert first_fit([50, 60], free=55, share=5) == 0  # it goes once it fits in the memory free now
    assert first_fit([60, 50], free=55, share=5) == 1
    assert first_fit([60, 50], free=0, share=5) == 0  # only large cases left: the first waits for its memory


def test_a_parallel_fill_takes_a_small_case_past_a_large_one_and_still_prunes_in_plan_order(tmp_path):
    # run 9 (H100): a case needing the whole device, taken in plan order, drained every slot while it waited
    # for its memory. Passed over instead, it must still count as an earlier task: its OOM prunes the larger
    # cases after it, so their rows wait for it as a serial fill's would
    from popcorn.bench.arbiter import Arbiter
    from popcorn.bench.runner import _Runner, reservation

    by_case: dict = {}
    for t in plan(backends=["torch"]).todo:
        by_case.setdefault((t.case.case_id, t.grad), []).append(t)
    groups = [g for (_, grad), g in by_case.items() if grad]
    small, large, larger = groups[0], groups[-2], groups[-1]  # the slice grows along hidden
    runner = _Runner(ShardSink(tmp_path / "out"), None, 2, Tasks(large + small + larger))
    need = {id(g): reservation(g[0]) for g in (small, large)}
    assert need[id(large)] > need[id(small)]
    runner.arbiter = Arbiter(memory_bytes=need[id(large)] + need[id(small)])  # a slot's share < large's need
    runner.arbiter.reserve(7, need[id(small)] + 1)  # another case holds memory: large does not fit now
    taken = runner.next_group()
    assert [t for _, t in taken] == small
    later = runner.groups[-1][0]
    assert later[1] in larger and runner.could_prune(*later)  # large, passed over, is still ahead of it
    runner.arbiter.unreserve(7)
    assert [t for _, t in runner.next_group()] == large  # it fits now
    assert runner.could_prune(*later)


def test_an_oom_retried_alone_runs_in_a_fresh_worker_with_every_other_worker_stopped(tmp_path, monkeypatch):
    # run 10 (H100): idle workers held 1.5-2.8 GiB each, and 1.5 GiB cases ran out of memory again when
    # "retried alone" beside them; an OOM row that prunes a stratum must be the case's own
    from popcorn.bench.arbiter import Arbiter
    from popcorn.bench.runner import _Runner
    from popcorn.bench.worker import Worker

    monkeypatch.setenv("TOY_OOM_FROM", "1")
    tasks = plan(backends=["toy:oom"])
    runner = _Runner(ShardSink(tmp_path / "out"), None, 3, tasks)
    runner.arbiter = Arbiter(memory_bytes=2**30)
    slots = runner.slots
    try:
        for slot in slots:
            slot.worker = Worker(torch.device("cpu"), tmp_path / "sentinels", slot.index, runner.arbiter)
        first = slots[0].worker
        others = [s.worker for s in slots[1:]]
        task = next(t for t in tasks.todo if t.impl == "toy:oom")
        slots[0].reserve(1000)
        row = slots[0].retry_alone(task, last=True)
        assert row.status == "oom" and "retried alone" in row.reason
        assert all(s.worker is None for s in slots[1:]) and not any(w.proc.is_alive() for w in others)
        assert not first.proc.is_alive() and slots[0].worker is not None and slots[0].worker.proc.is_alive()
        assert runner.summary.phases["memory"] >= 0 and runner.summary.retried_alone == 1
    finally:
        for slot in slots:
            slot.stop_worker(kill=True)


def test_ooms_beside_other_cases_are_retried_side_by_side_first_and_alone_only_if_they_run_out_again(
        tmp_path, monkeypatch):
    # run 13 (H100): eleven cases ran out of memory at once beside others and were retried alone, one by one,
    # each with every worker stopped and a fresh one started: 260 s for 10 rows. Most passed once retried
    from popcorn.bench.arbiter import Arbiter
    from popcorn.bench.runner import _Runner

    monkeypatch.setenv("TOY_OOM_FROM", "32")
    monkeypatch.setenv("TOY_OOM_UNTIL", str(tmp_path / "fits"))
    tasks = plan(backends=["toy:oom_until"], limit=6)
    runner = _Runner(ShardSink(tmp_path / "out"), None, 2, tasks)
    runner.arbiter = Arbiter(memory_bytes=2**40)  # no other case holds memory: the other slot's worker does
    rounds = []
    run_slots = runner.run_slots

    def then_they_fit():
        run_slots()
        rounds.append([t for _, t in runner.deferred])
        (tmp_path / "fits").touch()
    monkeypatch.setattr(runner, "run_slots", then_they_fit)
    try:
        runner.go()
    finally:
        runner.finish()
    ooms = [t for t in tasks.todo if t.impl == "toy:oom_until" and t.case.dims["hidden"] >= 32]
    assert len(ooms) > 1 and sorted(map(id, rounds[0])) == sorted(map(id, ooms))  # deferred in the first round
    assert len(rounds) == 2 and rounds[1] == []  # retried side by side in a second one, where they fit
    assert runner.summary.retried_beside == len(ooms) and runner.summary.retried_alone == 0
    assert runner.summary.counts[("toy_scale", "toy:oom_until")] == {"pass": len(tasks.todo) // 2}
    written = [r for f in store.jsonl_files([tmp_path / "out"]) for r in store.read_file(f)]
    assert len(written) == len(tasks.todo) and {r.status for r in written} == {"pass"}


def test_an_idle_worker_holding_too_much_device_memory_is_stopped_and_what_it_holds_beyond_is_not_lent(tmp_path):
    # run 13 (H100): idle workers held 7 GiB (median) to 18 GiB outside the allocator, against 2 GiB allowed
    from popcorn.bench.arbiter import Arbiter
    from popcorn.bench.runner import CONTEXT_BYTES, RECYCLE_BYTES, _Runner
    from popcorn.bench.worker import Worker

    runner = _Runner(ShardSink(tmp_path / "out"), None, 2, plan(backends=["torch"]))
    runner.arbiter = Arbiter(memory_bytes=100 * 2**30)  # an even share of 50 GiB per worker
    slot = runner.slots[0]
    slot.worker = worker = Worker(torch.device("cpu"), tmp_path / "sentinels", 0, runner.arbiter)
    try:
        assert worker.fresh_footprint is None  # device memory is counted on CUDA alone
        worker.footprint = CONTEXT_BYTES + 2**30  # within the recycling bound: kept, its extra GiB not lent
        slot.idle(worker)
        assert slot.worker is worker and runner.arbiter.free() == 99 * 2**30
        worker.footprint = RECYCLE_BYTES + 1  # past RECYCLE_BYTES, within its share of a large device: kept
        slot.idle(worker)
        assert slot.worker is worker and runner.summary.recycled == 0
        runner.arbiter.memory = 6 * 2**30  # a share of 3 GiB: RECYCLE_BYTES bounds it
        worker.fresh_footprint = RECYCLE_BYTES  # a device whose context alone is that large: no recycling at once
        slot.idle(worker)
        assert slot.worker is worker and runner.summary.recycled == 0
        worker.fresh_footprint = None
        slot.idle(worker)
        assert slot.worker is None and not worker.proc.is_alive() and runner.summary.recycled == 1
        assert runner.arbiter.free() == 6 * 2**30  # its memory went with it
        assert runner.summary.breakdown()["idle_worker_gib"][1] == round((RECYCLE_BYTES + 1) / 2**30, 2)
    finally:
        slot.stop_worker(kill=True)


def test_an_oom_beside_other_cases_is_retried_alone_after_every_other_case_ran(tmp_path, monkeypatch):
    # run 11 (H100): each OOM retried at once drained the device, every slot idle while the cases in flight
    # ended and the retry ran (813-1,052 worker-seconds of a 170 s, 12-worker fill): the retries wait for the end
    from popcorn.bench.arbiter import Arbiter
    from popcorn.bench.runner import _Runner

    monkeypatch.setenv("TOY_OOM_FROM", "32")
    tasks = plan(backends=["toy:oom"], limit=6)
    sink = ShardSink(tmp_path / "out")
    runner = _Runner(sink, None, 2, tasks)
    runner.arbiter = Arbiter(memory_bytes=2**40)
    runner.arbiter.reserve(7, 1)  # another fill's case holds memory all along: every OOM is beside it
    seen = {}
    retry = runner.retry_deferred

    def at_the_end():
        seen["deferred"] = [t for _, t in runner.deferred]
        seen["counted"] = runner.summary.measured
        seen["groups_left"] = len(runner.groups)
        runner.arbiter.unreserve(7)  # the other fill ends: the retries get the device to themselves
        retry()
    monkeypatch.setattr(runner, "retry_deferred", at_the_end)
    try:
        runner.go()
    finally:
        runner.finish()
    ooms = [t for t in tasks.todo if t.impl == "toy:oom" and t.case.dims["hidden"] >= 32]
    assert len(ooms) > 1 and sorted(map(id, seen["deferred"])) == sorted(map(id, ooms))
    # every other pair was counted before the first retry: none was retried at once
    assert seen["groups_left"] == 0 and seen["counted"] == len(tasks.todo) - len(ooms)
    # as a serial fill has it: the smallest OOM, alone, is the case's own and prunes the larger ones
    assert runner.summary.retried_beside == len(ooms) and runner.summary.retried_alone == 1
    assert runner.summary.counts[("toy_scale", "toy:oom")] == {"pass": len(tasks.todo) // 2 - len(ooms), "oom": 1,
                                                               "pruned": len(ooms) - 1}
    written = [r for f in store.jsonl_files([tmp_path / "out"]) for r in store.read_file(f)]
    assert [r.case_id for r in written if r.status == "oom"] == [ooms[0].case.case_id]
    assert all("retried alone" in r.reason for r in written if r.status == "oom")
    assert len(written) == runner.summary.measured


def test_the_summary_says_which_device_states_the_rows_were_timed_in():
    from popcorn.bench.summary import Summary

    summary = Summary()
    assert summary.states() is None  # CPU rows carry no canary
    summary.canaries += [1.29, 1.30, 1.47]
    assert "1.290 to 1.470" in summary.states() and "1 of 3 timed row(s) more than 5% above" in summary.states()
    summary.add("rms_norm", "torch", "pass")
    assert summary.states() in summary.table()
