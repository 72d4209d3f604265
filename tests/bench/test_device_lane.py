"""The device's lanes across processes (popcorn.bench.device_lane): real flock(2) locks, and two real
fills on one device whose timing never overlaps the other's trials."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from popcorn.bench.device_lane import DeviceLane, DeviceMemory, device_key, lane_dir
from popcorn.bench.lane import EXCLUSIVE, SHARED

ROOT = Path(__file__).resolve().parents[2]


def taking(lane: DeviceLane, kind: str) -> threading.Event:
    """Take ``kind`` on a thread; the event is set once it is held."""
    got = threading.Event()
    threading.Thread(target=lambda: (lane.take(kind), got.set()), daemon=True).start()
    return got


def test_timing_waits_for_trials_and_new_trials_wait_for_timing(tmp_path):
    # each DeviceLane opens its own files, so its locks conflict as another process's would
    trial, timing, late_trial = (DeviceLane(tmp_path, "gpu") for _ in range(3))
    trial.take(SHARED)
    timed = taking(timing, EXCLUSIVE)
    assert not timed.wait(0.3)  # a trial runs: timing waits
    late = taking(late_trial, SHARED)
    assert not late.wait(0.3)  # timing waits: no new trial starts before it (the gate)
    trial.release()
    assert timed.wait(10) and not late.is_set()
    timing.release()
    assert late.wait(10)
    late_trial.release()


def test_trials_share_the_lane_and_holds_do_not_nest(tmp_path):
    a, b = DeviceLane(tmp_path, "gpu"), DeviceLane(tmp_path, "gpu")
    a.take(SHARED)
    assert taking(b, SHARED).wait(10)  # trials of two fills run side by side
    with pytest.raises(RuntimeError, match="do not nest"):
        a.take(EXCLUSIVE)
    a.release(), b.release()


def test_a_killed_process_holds_nothing(tmp_path):
    code = ("import sys, time; from pathlib import Path; from popcorn.bench.device_lane import DeviceLane; "
            "lane = DeviceLane(Path(sys.argv[1]), 'gpu'); lane.take('exclusive'); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "held"
        mine = DeviceLane(tmp_path, "gpu")
        got = taking(mine, SHARED)
        assert not got.wait(0.3)
        proc.send_signal(signal.SIGKILL)
        assert got.wait(10)
        mine.release()
    finally:
        proc.kill()
        proc.wait()


def test_lanes_are_shared_on_cuda_by_default_and_on_cpu_only_when_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("POPCORN_LANE_DIR", raising=False)
    assert lane_dir(torch.device("cpu")) is None
    assert lane_dir(torch.device("cuda")).name == "popcorn-lanes"
    monkeypatch.setenv("POPCORN_LANE_DIR", str(tmp_path))
    assert lane_dir(torch.device("cpu")) == tmp_path
    monkeypatch.setenv("POPCORN_LANE_DIR", "off")
    assert lane_dir(torch.device("cuda")) is None
    assert device_key(torch.device("cpu")) == "cpu"


FILL = ("import sys; from popcorn.bench.fill import fill; from tests.bench import fill_ops; "
        "s = fill([fill_ops.toy_scale], backends=['toy:lanes'], slice_spec=fill_ops.SLICE, device='cpu', trials=3, "
        "workers=int(sys.argv[1]), limit=12); print('measured', s.measured)")


def spans(log: Path) -> list[tuple[str, float, float]]:
    return [(held, float(t0), float(t1)) for _, held, t0, t1, _ in (line.split() for line in log.read_text().splitlines())]


def test_two_fills_on_one_device_never_time_beside_the_others_trials(tmp_path):
    procs = []
    for i, workers in enumerate(("1", "2")):  # a serial and a parallel fill at once
        env = {**os.environ, "POPCORN_CACHE_DIR": str(tmp_path / f"cache{i}"), "POPCORN_BENCH_TARGET_MS": "2",
               "POPCORN_LANE_DIR": str(tmp_path / "lanes"), "TOY_LANE_LOG": str(tmp_path / f"lanes{i}.log")}
        procs.append(subprocess.Popen([sys.executable, "-c", FILL, workers], env=env, cwd=ROOT, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "measured 24" in out, err[-2000:]
    a, b = spans(tmp_path / "lanes0.log"), spans(tmp_path / "lanes1.log")
    for log in (a, b):  # the serial fill holds lanes too: the device's, across processes
        assert {SHARED, EXCLUSIVE} <= {s[0] for s in log}
    assert min(s[1] for s in a) < max(s[2] for s in b) and min(s[1] for s in b) < max(s[2] for s in a)  # side by side
    for mine, theirs in ((a, b), (b, a)):
        trials = [s for s in theirs if s[0] == SHARED]
        for _, t0, t1 in (s for s in mine if s[0] == EXCLUSIVE):
            assert not [s for s in trials if s[1] < t1 and t0 < s[2]], "the other fill's trial ran while this one timed"


def reserving(memory, name: str, nbytes: int, capacity: int = 100) -> threading.Event:
    got = threading.Event()
    threading.Thread(target=lambda: memory.reserve(name, nbytes, capacity) and got.set(), daemon=True).start()
    return got


def test_memory_is_granted_in_the_order_asked_and_only_where_it_fits(tmp_path):
    memory = DeviceMemory(tmp_path, "gpu")
    pid = os.getpid()
    assert memory.reserve(f"{pid}-0", 60, 100)
    large = reserving(memory, f"{pid}-1", 50)
    assert not large.wait(0.3)  # 60 + 50 > 100: it waits
    small = reserving(memory, f"{pid}-2", 10)
    assert not small.wait(0.3)  # it would fit, but a larger case asked first: never overtaken
    memory.release(f"{pid}-0")
    assert large.wait(10) and small.wait(10)
    assert memory.held() == {f"{pid}-1": 50, f"{pid}-2": 10}
    assert not memory.reserve(f"{pid}-3", 90, 100, closed=lambda: True)  # a stopping fill reserves nothing
    assert f"{pid}-3" not in memory.held()
    memory.release(f"{pid}-2")
    solo = reserving(memory, f"{pid}-1", 100)  # an OOM retried alone: the case's own reservation grows
    assert solo.wait(10) and memory.held() == {f"{pid}-1": 100}


def test_a_re_reservation_waits_holding_nothing(tmp_path):
    # the ledger's side of an OOM retried alone (test_parallel has the arbiter's): another fill's case
    # queued for this reservation's memory goes first instead of both waiting for ever
    memory, pid = DeviceMemory(tmp_path, "gpu"), os.getpid()
    assert memory.reserve(f"{pid}-0", 60, 100)
    queued = reserving(memory, f"{pid}-1", 60)
    assert not queued.wait(0.3)
    solo = reserving(memory, f"{pid}-0", 100)
    assert queued.wait(10) and not solo.wait(0.3)
    memory.release(f"{pid}-1")
    assert solo.wait(10) and memory.held() == {f"{pid}-0": 100}


def test_two_oom_retries_of_one_fill_do_not_deadlock_through_the_ledger(tmp_path):
    # an H100 sweep stalled so (the stall report showed it): slot 0 OOMed and asked for the whole device,
    # waiting in the fill's arbiter while its ledger entry stayed; slot 1 OOMed too, got the arbiter's
    # whole device first and waited in the ledger for slot 0's stale entry, and every other fill on the
    # device queued in the ledger behind slot 1
    from popcorn.bench.arbiter import Arbiter

    ledger = DeviceMemory(tmp_path, "gpu")
    arbiter = Arbiter(100, ledger)
    arbiter.reserve(0, 30)
    arbiter.reserve(1, 30)
    first, second = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (arbiter.reserve(1, 0, solo=True), first.set()), daemon=True).start()
    assert not first.wait(0.3)  # slot 0's case still holds its memory
    threading.Thread(target=lambda: (arbiter.reserve(0, 0, solo=True), second.set()), daemon=True).start()
    assert first.wait(10), "slot 1's retry waits for slot 0's ledger entry, which slot 0 keeps while it waits"
    assert not second.wait(0.3)
    assert ledger.held() == {f"{os.getpid()}-1": 100}
    arbiter.unreserve(1)
    assert second.wait(10) and ledger.held() == {f"{os.getpid()}-0": 100}


def test_a_dead_process_holds_no_memory(tmp_path):
    code = ("import os, sys, time; from pathlib import Path; from popcorn.bench.device_lane import DeviceMemory; "
            "DeviceMemory(Path(sys.argv[1]), 'gpu').reserve(f'{os.getpid()}-0', 90, 100); print('held', flush=True); "
            "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "held"
        got = reserving(DeviceMemory(tmp_path, "gpu"), f"{os.getpid()}-0", 50)
        assert not got.wait(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert got.wait(10)
    finally:
        proc.kill()


def test_two_fills_arbiters_share_the_devices_memory(tmp_path):
    from popcorn.bench.arbiter import Arbiter

    ledger = DeviceMemory(tmp_path, "gpu")
    one, two = Arbiter(100, ledger), Arbiter(100, ledger)
    one.reserve(0, 60)
    assert two.others_reserved(1)  # the other fill's case counts: an OOM here is retried alone
    got = threading.Event()
    threading.Thread(target=lambda: (two.reserve(1, 50), got.set()), daemon=True).start()
    assert not got.wait(0.3)
    one.unreserve(0)
    assert got.wait(10)
    two.unreserve(1)
    assert ledger.held() == {}


def test_autotuners_benchmark_in_the_shared_lane(monkeypatch, lane_supervisor):
    # Triton's autotuner (liger, fla) and inductor's benchmark configs on the device at a kernel's first
    # call: a worker makes them hold the shared lane, never beside another worker's timing
    import triton.testing
    from torch._inductor.runtime import benchmarking

    from popcorn.bench import lane

    from triton.runtime.autotuner import Autotuner

    monkeypatch.setattr(Autotuner, "check_disk_cache", Autotuner.check_disk_cache)  # guarded below, undone after
    seen, asked_ms = [], []
    monkeypatch.setattr(triton.testing, "do_bench",
                        lambda fn, **k: asked_ms.append((k.get("warmup"), k.get("rep"))) or seen.append(lane.held) or 1.0)
    previous = getattr(benchmarking, "_gpu_benchmark_lock_context", None)
    try:
        lane.guard_autotuning()
        kernel_calls = []
        call = lambda: kernel_calls.append(lane.held)  # noqa: E731 - a config's kernel call

        assert triton.testing.do_bench(call) == 1.0 and seen == [SHARED]
        assert kernel_calls == [None]  # its first call (the config's JIT compile) ran outside the lane
        short = lane.AUTOTUNE_BENCH_MS
        assert short["rep"] < 100 and asked_ms == [(short["warmup"], short["rep"])]  # every timing waits for it
        triton.testing.do_bench(call, rep=7)
        assert asked_ms[-1] == (short["warmup"], 7)  # a caller's shorter value stands
        triton.testing.do_bench(call, warmup=25, rep=40)  # inductor's autotuner asks for these: capped
        assert asked_ms[-1] == (short["warmup"], short["rep"])
        del kernel_calls[1:]
        with lane.hold(SHARED):  # inside a trial, the benchmark keeps the trial's hold
            triton.testing.do_bench(call)
        assert kernel_calls == [None]
        if hasattr(benchmarking, "set_gpu_benchmark_lock_context"):
            with benchmarking.maybe_gpu_benchmark_lock():
                seen.append(lane.held)
        assert set(seen) == {SHARED}
        holds = len(seen)  # the explicit hold asked once, the benchmark nested in it nothing
        asked = lane_supervisor.settled(2 * holds)
        assert asked.count(("lane", SHARED)) == asked.count(("lane", "release")) == holds
    finally:
        if hasattr(benchmarking, "set_gpu_benchmark_lock_context"):
            benchmarking.set_gpu_benchmark_lock_context(previous)


def test_a_triton_autotuner_compiles_every_config_then_benchmarks_them_in_one_hold(monkeypatch, lane_supervisor):
    # fla tunes 7 to 18 configs per new shape: a hold per config waited for the queued timings each time
    import triton.testing
    from triton.runtime.autotuner import Autotuner

    from popcorn.bench import lane

    monkeypatch.setattr(Autotuner, "check_disk_cache", Autotuner.check_disk_cache)
    timed = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **k: (fn(), timed.append(lane.held)) and [1.0] * 3)
    lane.guard_autotuning()
    assert getattr(Autotuner.check_disk_cache, "popcorn_lane", False)  # this Triton's autotuner is guarded

    calls = []

    def bench_fn():  # the Autotuner's benchmark(): one do_bench per config
        return {c: triton.testing.do_bench(lambda c=c: calls.append((c, lane.held)), quantiles=(0.5, 0.2, 0.8))
                for c in "abc"}

    check = lane.in_one_hold(lambda self, key, configs, fn: fn())  # check_disk_cache without a cached timing
    assert check(None, ("D", 4096), list("abc"), bench_fn) == {c: [1.0] * 3 for c in "abc"}
    assert sorted(calls[:3]) == [("a", None), ("b", None), ("c", None)]  # compiled outside the lanes
    assert timed == [SHARED] * 3 and all(held == SHARED for _, held in calls[3:])  # then timed in one hold
    asked = lane_supervisor.settled(2)
    assert asked == [("lane", SHARED), ("lane", "release")]


class Tuner:
    """The attributes of Triton's Autotuner that say whether its kernel calls may overlap."""

    def __init__(self, restore_value=()):
        self.restore_value = list(restore_value)
        self.user_defined_pre_hook = self.user_defined_post_hook = False


@pytest.mark.parametrize("restore", [(), ("dq",)], ids=["side-by-side", "restore_value"])
def test_an_autotuners_configs_compile_side_by_side(monkeypatch, lane_supervisor, restore):
    # a compile is mostly ptxas, a subprocess: a new key's configs compile in threads, the first one alone (it
    # sets up what Triton does once per kernel); a tuner that restores values between calls compiles one by one
    import triton.testing
    from triton.runtime.autotuner import Autotuner

    from popcorn.bench import lane

    monkeypatch.setattr(Autotuner, "check_disk_cache", Autotuner.check_disk_cache)
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, **k: fn() or [1.0] * 3)
    lane.guard_autotuning()
    configs = list("abcde")
    side_by_side = threading.Barrier(3, timeout=60)  # b, d and e meet only if they run at once
    compiled, threads, me = [], set(), threading.current_thread().name

    def compile_then_launch(c):
        if lane.held is not None:  # the timed pass
            return
        threads.add(threading.current_thread().name)
        if c == "c":
            raise RuntimeError("out of resources")  # a config that cannot compile: its error is the timed pass's
        if c != "a" and not restore:
            side_by_side.wait()
        compiled.append(c)

    def bench_fn():
        return {c: triton.testing.do_bench(lambda c=c: compile_then_launch(c)) for c in configs}

    check = lane.in_one_hold(lambda self, key, configs, fn: fn())
    assert check(Tuner(restore), ("D", 64), configs, bench_fn) == {c: [1.0] * 3 for c in configs}
    assert compiled[0] == "a" and sorted(compiled) == list("abde")  # all done before the timed pass
    assert threads == {me} if restore else (me in threads and len(threads) >= 2)
    assert lane_supervisor.settled(2) == [("lane", SHARED), ("lane", "release")]


class ConfigTimer:
    """A library autotuner's shape: a method that times one config (quack's Autotuner._bench)."""

    seen: list = []

    def _bench(self, config):
        from popcorn.bench import lane

        self.seen.append((config, lane.held))
        return [1.0]


def test_a_library_autotuner_is_guarded_once_its_backend_runs(monkeypatch, lane_supervisor):
    from popcorn.bench import lane

    monkeypatch.setitem(lane.LIBRARY_AUTOTUNERS, "toylib", (__name__, "ConfigTimer", "_bench"))
    monkeypatch.setattr(ConfigTimer, "_bench", ConfigTimer._bench)  # undone after the test
    monkeypatch.setattr(lane, "_guarding", False)
    lane.guard_backend("toylib")  # before guard_autotuning (outside a fill's worker): nothing changes
    assert not getattr(ConfigTimer._bench, "popcorn_lane", False)
    monkeypatch.setattr(lane, "_guarding", True)
    lane.guard_backend("toylib")
    lane.guard_backend("no-such-backend")  # a backend without an autotuner of its own: nothing
    ConfigTimer.seen = []
    assert ConfigTimer()._bench("a") == [1.0]
    assert ConfigTimer.seen == [("a", SHARED)] and lane.held is None


def test_lane_files_are_shared_by_every_user_of_the_machine(tmp_path):
    directory = tmp_path / "lanes"
    DeviceLane(directory, "gpu").close()
    DeviceMemory(directory, "gpu").held()
    assert directory.stat().st_mode & 0o1777 == 0o1777  # sticky and world-writable, like /tmp
    for name in ("gpu.lane", "gpu.gate", "gpu.mem"):
        assert (directory / name).stat().st_mode & 0o666 == 0o666, name  # whatever the umask


def test_a_serial_fill_reserves_its_cases_in_a_shared_devices_ledger(tmp_path, monkeypatch):
    # on a device other fills may share, even a one-worker fill puts each case in the ledger (on CPU no
    # device is shared: the ledger is handed in here)
    from popcorn.bench import runner
    from popcorn.bench.fill import fill

    from . import fill_ops

    class Spy(DeviceMemory):
        asked: list = []

        def reserve(self, name, nbytes, capacity, closed=lambda: False):
            self.asked.append(name)
            return super().reserve(name, nbytes, capacity, closed)
    ledger = Spy(tmp_path / "lanes", "cpu")
    monkeypatch.setattr(runner, "_device_memory", lambda tasks, workers: (2**40, ledger))
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")
    monkeypatch.setenv("TOY_LANE_LOG", str(tmp_path / "lanes.log"))
    summary = fill([fill_ops.toy_scale], backends=["toy:lanes"], slice_spec=fill_ops.SLICE, device="cpu", trials=1,
                   workers=1, limit=2)
    assert summary.measured == 4 and len(Spy.asked) == 2  # one reservation per case, the case's two backends
    assert ledger.held() == {}  # each given back
