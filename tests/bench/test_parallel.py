"""The parallel fill on CPU: real worker processes side by side, the device lanes they share, work done
once per case, and two workers dying at once. The serial/parallel fault tests are in test_fill.py."""

import os
import subprocess
import sys
import threading
import time
import types

import pytest
import torch

from popcorn.bench import lane, store
from popcorn.bench.arbiter import Arbiter
from popcorn.bench.fill import fill
from popcorn.bench.lane import EXCLUSIVE, SHARED

from . import fill_ops
from .fill_ops import SLICE


@pytest.fixture(autouse=True)
def env(toy_cache):
    return toy_cache


def rows(op, impl):
    return [r for r in store.read(op) if r.impl == impl]


def test_two_workers_dying_at_once_cost_two_crash_rows_and_the_fill_finishes(env, monkeypatch):
    meet = env / "meet"
    meet.mkdir()
    monkeypatch.setenv("TOY_MEET_DIR", str(meet))
    monkeypatch.setenv("TOY_DIE_TOGETHER", "17,21")
    summary = fill([fill_ops.toy_scale], backends=["toy:die_together"], slice_spec=SLICE, device="cpu", trials=2,
                   workers=3)
    assert sorted(os.listdir(meet)) == ["17", "21"]  # both reached the rendezvous: they died together
    died = rows("toy_scale", "toy:die_together")
    crashes = sorted(r.config for r in died if r.status == "crash")
    assert len(crashes) == 2 and '"hidden": 17' in crashes[0] + crashes[1] and '"hidden": 21' in crashes[0] + crashes[1]
    assert all(r.status == "pass" for r in died if r.status != "crash")
    assert len(died) == len(rows("toy_scale", "torch")) > 10  # every other case was measured
    assert summary.counts[("toy_scale", "toy:die_together")]["crash"] == 2
    assert not list((env / "cache").parent.glob("fill/sentinel-*"))  # no sentinel left behind
    # which worker ran each pair (a worker's state on the device can set its timings): every row a worker
    # returned names one the fill started; the two that died were replaced by fresh ones
    returned = {(r.op, r.impl, r.case_id, r.grad) for r in died + rows("toy_scale", "torch") if r.status == "pass"}
    assert returned <= set(summary.timed_by) and set(summary.timed_by.values()) <= set(summary.worker_starts)
    assert len(summary.worker_starts) == 5


def test_timing_never_shares_the_device_with_correctness_trials(env, monkeypatch):
    log = env / "lanes.log"
    monkeypatch.setenv("TOY_LANE_LOG", str(log))
    summary = fill([fill_ops.toy_scale], backends=["toy:lanes"], slice_spec=SLICE, device="cpu", trials=3, workers=3,
                   limit=12)
    assert summary.measured == 24
    calls = [line.split() for line in log.read_text().splitlines()]
    spans = [(int(pid), held, float(t0), float(t1)) for pid, held, t0, t1, _ in calls]
    # with enough cores the exclusive holder times on a core of its own, the first of the fill's, which no other
    # worker runs on; with fewer (a 2-core CI machine) every worker keeps them all
    mine = sorted(os.sched_getaffinity(0))
    cores: dict = {}
    for _, held, _, _, allowed in calls:
        cores.setdefault(held, set()).update(map(int, allowed.split(",")))
    if len(mine) >= lane.KEEP_A_CORE_FROM:
        assert cores[EXCLUSIVE] == {mine[0]} and mine[0] not in cores[SHARED]
    else:
        assert cores[EXCLUSIVE] == cores[SHARED] == set(mine)
    timed = [s for s in spans if s[1] == EXCLUSIVE]
    trials = [s for s in spans if s[1] == SHARED]
    assert timed and trials and {s[0] for s in spans} and len({s[0] for s in trials}) > 1  # several workers ran
    for pid, _, t0, t1 in timed:
        overlapping = [s for s in trials if s[0] != pid and s[2] < t1 and t0 < s[3]]
        assert not overlapping, f"a trial of another worker ran while worker {pid} timed"
    b = summary.breakdown()
    assert b["workers"] == 3 and b["busy_s"] > 0 and 0 < b["busy_fraction"] < 1
    lanes = b["lanes"]  # the lanes' states over the run: the exclusive one's seconds are the busy time
    assert abs(lanes["exclusive"] - b["busy_s"]) < 0.01 and lanes["shared"] > 0 and lanes["mean_shared"] >= 1
    assert sum(v for k, v in lanes.items() if k != "mean_shared") <= b["wall_s"]
    assert "lanes: exclusive" in summary.table()
    assert b["phases"]["timing"] > 0 and b["phases"]["trials"] > 0
    per_pair = b["per_pair"]  # each backend's seconds per pair, from the same phase clocks
    assert {k: v["pairs"] for k, v in per_pair.items()} == {"toy:lanes": 12, "torch": 12}
    assert per_pair["toy:lanes"]["timing"] > 0 and per_pair["toy:lanes"]["trials"] > 0
    timing = sum(v["timing"] * v["pairs"] for v in per_pair.values())
    assert abs(timing - b["phases"]["timing"]) < 0.01 * b["phases"]["timing"] + 0.05


def test_a_cases_inputs_and_truth_are_computed_once_for_all_its_backends(env, monkeypatch):
    log = env / "truth.log"
    monkeypatch.setenv("TOY_TRUTH_LOG", str(log))
    trials = 3
    summary = fill([fill_ops.toy_counted], backends=["toy:one", "toy:two"], device="cpu", trials=trials, limit=4,
                   workers=2)
    assert summary.measured == 12 and summary.counts[("toy_counted", "toy:two")] == {"pass": 4}
    # three backends (the reference's own row, toy:one, toy:two) shared one fp64 run per case and trial
    # (two sampled cases may share a shape, so count the runs rather than tell cases apart)
    assert len(log.read_text().split()) == 4 * trials


def test_a_worker_keeps_the_first_core_for_the_thread_that_times():
    # run in a thread of its own: affinity is per thread, and this one ends with it
    seen = {}

    def worker():
        mine = sorted(os.sched_getaffinity(0))
        seen["rest"] = lane.keep_a_core_for_timing(least=2)
        seen["after"] = sorted(os.sched_getaffinity(0))
        lane._pin(timing=True)
        seen["timing"] = sorted(os.sched_getaffinity(0))
        lane._pin(timing=False)
        seen["back"] = sorted(os.sched_getaffinity(0))
        seen["mine"] = mine
        seen["too_few"] = lane.keep_a_core_for_timing(least=len(mine) + 1)

    cores = lane._cores
    try:
        t = threading.Thread(target=worker)
        t.start()
        t.join(30)
    finally:
        lane._cores = cores
    mine = seen["mine"]
    if len(mine) < 2:
        pytest.skip("one core: nothing to keep")
    assert seen["rest"] == set(mine[1:]) and seen["after"] == mine[1:]
    assert seen["timing"] == mine[:1] and seen["back"] == mine[1:]
    assert seen["too_few"] is None  # fewer cores than asked for: nothing kept


def test_the_arbiter_grants_no_more_shared_holds_at_once_than_its_cap():
    arbiter = Arbiter(shared_cap=2)
    arbiter.acquire(0, SHARED)
    arbiter.acquire(1, SHARED)
    third = threading.Event()
    threading.Thread(target=lambda: (arbiter.acquire(2, SHARED), third.set()), daemon=True).start()
    assert not third.wait(0.2)  # two holds already: the third waits
    arbiter.release(0)
    assert third.wait(10) and sum(arbiter._shared.values()) == 2
    timing = threading.Event()
    threading.Thread(target=lambda: (arbiter.acquire(0, EXCLUSIVE), timing.set()), daemon=True).start()
    arbiter.release(1)
    arbiter.release(2)
    assert timing.wait(10)  # the cap never keeps timing waiting once the holds end


def test_the_arbiter_keeps_timing_alone_and_frees_what_a_dead_worker_held():
    arbiter = Arbiter()
    arbiter.acquire(0, SHARED)
    arbiter.acquire(1, SHARED)
    got = threading.Event()

    def timer():
        arbiter.acquire(2, EXCLUSIVE)
        got.set()

    t = threading.Thread(target=timer, daemon=True)
    t.start()
    arbiter.release(0)
    assert not got.wait(0.2)  # slot 1's trial is still open
    late = threading.Event()
    threading.Thread(target=lambda: (arbiter.acquire(3, SHARED), late.set()), daemon=True).start()
    arbiter.drop(1)  # slot 1's worker died mid-trial
    assert got.wait(10) and not late.wait(0.2)  # timing waited for no one else; a new trial waits for it
    time.sleep(0.05)
    arbiter.release(2)
    assert late.wait(10) and arbiter.busy() >= 0.05


def _waits_for_a_shared_hold(arbiter, thread, seconds: float = 300) -> bool:
    deadline = time.monotonic() + seconds
    while not arbiter._shared_waiting and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(arbiter._shared_waiting) and thread.is_alive()


def test_a_worker_opens_and_tears_down_its_context_in_a_shared_hold_never_beside_a_timing(tmp_path):
    # opening a CUDA context (a fresh worker's first device call) and tearing it down (an idle worker stopped)
    # is device work, which another worker's timing must not have beside it
    import torch

    from popcorn.bench.worker import Worker

    arbiter = Arbiter()
    arbiter.acquire(0, EXCLUSIVE)  # slot 0's worker times
    made: dict = {}
    start = threading.Thread(target=lambda: made.setdefault("worker", Worker(torch.device("cpu"), tmp_path, 1, arbiter)))
    start.start()
    assert _waits_for_a_shared_hold(arbiter, start)  # the fresh worker is not ready: it waits to open its context
    arbiter.release(0)
    start.join(300)
    worker = made["worker"]
    assert worker.proc.is_alive() and worker.fresh_footprint is None  # ready (no device bytes on CPU)
    assert not arbiter._shared.get(1)  # the startup's hold ended with the startup
    arbiter.acquire(0, EXCLUSIVE)
    stop = threading.Thread(target=worker.close)
    stop.start()
    assert _waits_for_a_shared_hold(arbiter, stop) and worker.proc.is_alive()  # it leaves once the timing ends
    arbiter.release(0)
    stop.join(60)
    assert not stop.is_alive() and not worker.proc.is_alive() and not arbiter._shared.get(1)


def test_the_arbiter_counts_the_seconds_its_lanes_spend_in_each_state(monkeypatch):
    # whether a fill's device work or its workers limit it: exclusive, shared (and how many at once), free
    from popcorn.bench import arbiter as arbiter_module

    now = [0.0]
    monkeypatch.setattr(arbiter_module, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    arbiter = Arbiter()
    for t, slot, act in [(1, 0, "shared"), (3, 1, "shared"), (4, 0, "release"), (6, 1, "release"),
                         (7, 2, "exclusive"), (9, 2, "release")]:
        now[0] = t
        arbiter.release(slot) if act == "release" else arbiter.acquire(slot, SHARED if act == "shared" else EXCLUSIVE)
    now[0] = 10
    lanes = arbiter.occupancy()
    assert lanes == {"exclusive": 2, "shared": 5, "handover": 0, "free": 3, "mean_shared": 6 / 5}
    assert arbiter.busy() == 2


def test_memory_reservations_queue_and_a_solo_retry_waits_for_the_device_to_empty():
    arbiter = Arbiter(memory_bytes=100)
    arbiter.reserve(0, 60)
    second = threading.Event()
    threading.Thread(target=lambda: (arbiter.reserve(1, 60), second.set()), daemon=True).start()
    assert not second.wait(0.2)  # 120 bytes would not fit
    arbiter.unreserve(0)
    assert second.wait(10) and arbiter.others_reserved(0)
    solo = threading.Event()
    threading.Thread(target=lambda: (arbiter.reserve(2, 10, solo=True), solo.set()), daemon=True).start()
    assert not solo.wait(0.2)
    arbiter.unreserve(1)
    assert solo.wait(10) and not arbiter.others_reserved(2)


def test_an_oom_retried_alone_does_not_deadlock_against_a_case_queued_for_its_memory():
    # slot 0's case OOMed beside slot 1's queued request, which needs slot 0's memory: the solo retry
    # must wait without holding that memory (held, the two waited on each other for ever: an H100 sweep
    # stalled so, every fill waiting and no watchdog firing)
    arbiter = Arbiter(memory_bytes=100)
    arbiter.reserve(0, 60)
    queued, solo = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (arbiter.reserve(1, 60), queued.set()), daemon=True).start()
    assert not queued.wait(0.2)
    threading.Thread(target=lambda: (arbiter.reserve(0, 0, solo=True), solo.set()), daemon=True).start()
    assert queued.wait(10) and not solo.wait(0.2)  # the case asked first goes first; the retry waits for it
    arbiter.unreserve(1)
    assert solo.wait(10) and not arbiter.others_reserved(0)


def test_memory_an_idle_worker_holds_beyond_its_allowance_is_not_lent_to_cases():
    # run 13 (H100): idle workers held 4-6 GiB each against 2 allowed; cases reserved what they held and
    # eleven ran out of memory at once
    arbiter = Arbiter(memory_bytes=100)
    arbiter.beyond(3, 30)
    assert arbiter.free() == 70
    arbiter.reserve(0, 60)
    second = threading.Event()
    threading.Thread(target=lambda: (arbiter.reserve(1, 20), second.set()), daemon=True).start()
    assert not second.wait(0.2)  # 60 + 20 fit the memory, not what idle workers leave of it
    arbiter.beyond(3, 0)  # that worker stopped (or gave its memory back)
    assert second.wait(10) and arbiter.free() == 20
    arbiter.unreserve(0)
    arbiter.unreserve(1)
    arbiter.beyond(2, 150)  # more than the whole: a case still gets what is left, not a wait for ever
    arbiter.reserve(0, 60)
    assert arbiter.free() == 0


def test_cli_refuses_a_worker_count_that_is_not_positive():
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--workers", "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--workers: '0' is not a positive whole number" in out.stderr


def test_ctrl_c_to_the_whole_process_group_keeps_the_rows_and_prints_the_summary(env):
    import signal

    cache = env / "cache"
    log = (env / "fill.err").open("w+")  # the progress line: two pairs counted, most of the fill still to go
    proc = subprocess.Popen([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--limit", "40",
                             "--backend", "torch", "--trials", "1", "--workers", "3", "--device", "cpu", "--slice",
                             "normalized_shape", "dtype=float32", "...=[2]", "eps=0.000001"],
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
                            env={**os.environ, "POPCORN_CACHE_DIR": str(cache)})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and "pass=2 " not in (env / "fill.err").read_text():
        time.sleep(0.05)
    assert proc.poll() is None, "the fill ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C (or `timeout`) does: every process of the group
    out, _ = proc.communicate(timeout=120)
    err = (env / "fill.err").read_text()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in out and "Traceback" not in err
    rows = store.read_file(next(cache.rglob("rms_norm.jsonl")))
    assert len(rows) >= 2 and all(r.status == "pass" for r in rows)  # no crash rows for the workers we killed
    assert not list(cache.parent.rglob("sentinel-*"))


def test_a_trial_that_waited_through_one_timing_goes_before_the_next_queued_timing():
    arbiter = Arbiter()
    arbiter.acquire(0, EXCLUSIVE)
    trial, second_timing, late_trial = threading.Event(), threading.Event(), threading.Event()
    threading.Thread(target=lambda: (arbiter.acquire(1, SHARED), trial.set()), daemon=True).start()
    while not arbiter._shared_waiting:  # the trial asks while slot 0 times
        time.sleep(0.01)
    threading.Thread(target=lambda: (arbiter.acquire(2, EXCLUSIVE), second_timing.set()), daemon=True).start()
    while not arbiter._exclusive_waiting:
        time.sleep(0.01)
    arbiter.release(0)
    assert trial.wait(10)  # not behind slot 2's timing, queued before slot 0 ended
    threading.Thread(target=lambda: (arbiter.acquire(3, SHARED), late_trial.set()), daemon=True).start()
    assert not second_timing.wait(0.2)  # the trial is open
    assert not late_trial.wait(0.2)  # a trial asking after the handover waits for the queued timing
    arbiter.release(1)
    assert second_timing.wait(10) and not late_trial.wait(0.2)
    arbiter.release(2)
    assert late_trial.wait(10)


def test_a_fill_that_counts_no_row_for_a_while_says_what_each_slot_is_doing(env, monkeypatch, capsys):
    """Run 8's sweep wrote no row for minutes and said nothing: now a stalled fill names each slot's task,
    its worker and how long, and what the lanes and memory hold."""
    from popcorn.bench import runner

    monkeypatch.setattr(runner, "STALL_S", 2.0)
    monkeypatch.setenv("TOY_HANG_AT", "33")
    fill([fill_ops.toy_scale], backends=["toy:hang"], slice_spec=SLICE, device="cpu", trials=2, workers=1,
         timeout=10)  # one slot: nothing is counted while it hangs
    err = capsys.readouterr().err
    reports = [r for r in err.split("\nfill: no row for ")[1:] if "toy:hang hidden=33," in r]
    assert reports, err[-2000:]  # one report at least while the hang held its slot
    report = reports[-1]
    assert "slot 0: toy_scale toy:hang" in report and "in worker" in report and "(watchdog 10 s" in report


def test_the_arbiter_describes_its_lanes_and_memory():
    arbiter = Arbiter(memory_bytes=8 * 2**30)
    arbiter.reserve(0, 2**30)
    arbiter.acquire(1, SHARED)
    text = arbiter.describe()
    assert "exclusive lane: free, 0 waiting" in text and "shared holds: slots [1]" in text
    assert "of 8.0: slot 0 1.00, 0 reservations queued" in text
    arbiter.release(1)
    arbiter.acquire(0, EXCLUSIVE)
    assert arbiter.describe().startswith("exclusive lane: slot 0")


def test_timings_queued_before_a_trial_run_back_to_back_before_it():
    # each timing waits for the device to drain of trials: queued timings go as one batch, so the drain is paid
    # once per batch (run 10, H100: one drain per timing held the fill near 0.6 s per pair)
    arbiter = Arbiter()
    arbiter.acquire(0, EXCLUSIVE)
    second_timing, trial = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (arbiter.acquire(2, EXCLUSIVE), second_timing.set()), daemon=True).start()
    while not arbiter._exclusive_waiting:
        time.sleep(0.01)
    threading.Thread(target=lambda: (arbiter.acquire(1, SHARED), trial.set()), daemon=True).start()
    while not arbiter._shared_waiting:  # the trial asks after both timings
        time.sleep(0.01)
    arbiter.release(0)
    assert second_timing.wait(10) and not trial.wait(0.2)  # the queued timing goes first
    arbiter.release(2)
    assert trial.wait(10)


def test_a_worker_killed_after_it_answered_is_torn_down_in_a_shared_hold(tmp_path):
    # a case that leaves the CUDA context unusable kills its worker: the context's teardown is device work,
    # so it waits for the timing in progress and no timing starts until the process is gone
    from popcorn.bench.worker import Worker

    arbiter = Arbiter()
    worker = Worker(torch.device("cpu"), tmp_path / "sentinels", slot=0, arbiter=arbiter)
    arbiter.acquire(1, EXCLUSIVE)  # another slot times
    killed = threading.Event()
    threading.Thread(target=lambda: (worker.kill(in_shared_hold=True), killed.set()), daemon=True).start()
    assert not killed.wait(0.5) and worker.proc.is_alive()  # waits for the timing
    arbiter.release(1)
    assert killed.wait(30) and not worker.proc.is_alive()
    assert not arbiter._shared and arbiter._exclusive is None  # the hold went with the worker
