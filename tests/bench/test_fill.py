"""bench fill end to end on CPU: a real worker process that dies, hangs and runs out of memory."""

import os
import subprocess
import sys

import pytest

from popcorn.bench import store
from popcorn.bench.fill import fill

from . import fill_ops
from .fill_ops import SLICE


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("POPCORN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("POPCORN_BENCH_TARGET_MS", "2")  # timing precision is not under test here
    return tmp_path


def rows(impl):
    return [r for r in store.read("toy_scale") if r.impl == impl]


def run(backends, **kw):
    kw.setdefault("trials", 2)
    return fill([fill_ops.toy_scale], backends=backends, slice_spec=SLICE, device="cpu", **kw)


# the fault guarantees hold for one worker and for several measuring side by side
workers = pytest.mark.parametrize("workers", [1, 3], ids=["serial", "parallel"])


@workers
def test_a_killed_worker_costs_exactly_one_crash_row_and_the_fill_finishes(workers):
    summary = run(["toy:die"], workers=workers)
    died = rows("toy:die")
    crashes = [r for r in died if r.status == "crash"]
    assert len(crashes) == 1
    assert '"hidden": 17' in crashes[0].config and "killed by signal 9" in crashes[0].reason
    assert len(died) == len(rows("torch")) > 10  # every other case was measured
    assert all(r.status == "pass" for r in died if r is not crashes[0])
    assert summary.counts[("toy_scale", "toy:die")]["crash"] == 1


@workers
def test_a_hang_costs_one_timeout_row_and_prunes_larger_cases(workers):
    # a watchdog of 20 s: a toy case takes milliseconds, so even a loaded 2-core machine never
    # comes near it, while the hang (an hour) always does
    summary = run(["toy:hang"], timeout=20, workers=workers)
    hung = rows("toy:hang")
    assert [r.status for r in hung].count("timeout") == 1
    timeout = next(r for r in hung if r.status == "timeout")
    assert '"hidden": 33' in timeout.config
    assert all('"hidden": 33' not in r.config for r in hung if r.status != "timeout")
    pruned = summary.counts[("toy_scale", "toy:hang")].get("pruned", 0)
    assert pruned > 0 and len(hung) + pruned == len(rows("torch"))
    assert all(int(r.config.split('"hidden": ')[1].split("}")[0].split(",")[0]) < 33
               for r in hung if r.status == "pass")
    # where the worker time went: the hang's watchdog as lost time of its backend, each worker's start
    b = summary.breakdown()
    hang = b["per_pair"]["toy:hang"]
    assert hang["lost"] * hang["pairs"] >= 20 and b["phases"]["lost"] >= 20  # at least the 20 s watchdog
    assert b["phases"]["startup"] > 0 and "idle" in b["phases"] and "lost" in summary.table()
    # a task's time outside its named phases, and the fill's own between tasks, are named too, not idle
    assert b["phases"]["other"] > 0 and b["phases"]["supervisor"] > 0 and "supervisor" in summary.table()
    assert b["per_pair"]["torch"]["other"] > 0


@workers
def test_oom_frontier_prunes_only_dominated_cases(workers):
    summary = run(["toy:oom"], workers=workers)
    ooms = [r for r in rows("toy:oom") if r.status == "oom"]
    assert len(ooms) == 1 and '"hidden": 64' in ooms[0].config  # the first size at or past 64, then pruned
    assert summary.counts[("toy_scale", "toy:oom")]["pruned"] > 0
    assert summary.counts[("toy_scale", "torch")].get("pruned", 0) == 0  # the reference runs every case


@workers
def test_rerun_measures_nothing_and_force_remeasures(workers):
    first = run(["toy:good"], workers=workers)
    assert first.measured > 0
    again = run(["toy:good"], workers=workers)
    assert again.measured == 0
    assert again.counts[("toy_scale", "toy:good")]["cached"] == first.counts[("toy_scale", "toy:good")]["pass"]
    forced = run(["toy:good"], force=True, workers=workers)
    assert forced.measured == first.measured


def test_cli_fill_writes_reference_rows(env):
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--limit", "5",
                          "--backend", "torch", "--trials", "2"], capture_output=True, text=True,
                         env={**os.environ, "POPCORN_CACHE_DIR": str(env)}, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "case-backend pairs measured" in out.stdout
    torch_rows = [r for r in store.read("rms_norm") if r.impl == "torch"]
    assert len(torch_rows) == 5 and all(r.status == "pass" for r in torch_rows)


def test_cli_rejects_unknown_ops():
    out = subprocess.run([sys.executable, "-m", "popcorn.cli", "bench", "fill", "nope"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "unknown op(s): nope" in out.stderr


class KillWorkerWhileIdle:
    """A progress stream that SIGKILLs the fill's worker when the Nth pair has been reported: the
    supervisor writes progress between cases, so the worker is idle then, holding no task."""

    def __init__(self, at: int):
        self.at, self.pairs, self.killed = at, 0, []

    def write(self, text: str) -> int:
        import multiprocessing as mp
        import signal

        if text.startswith("\r"):
            self.pairs += 1
            if self.pairs == self.at:
                for child in mp.active_children():
                    os.kill(child.pid, signal.SIGKILL)
                    child.join(10)
                    self.killed.append(child.pid)
        return len(text)

    def flush(self):
        pass


def test_a_worker_killed_between_cases_costs_no_row_and_the_fill_goes_on():
    stream = KillWorkerWhileIdle(at=4)
    summary = run(["toy:good"], out=stream)
    assert stream.killed  # the worker really died
    good = rows("toy:good")
    assert len(good) == len(rows("torch")) > 10 and all(r.status == "pass" for r in good)
    assert "crash" not in summary.counts[("toy_scale", "toy:good")]


class TerminateAfter:
    """A progress stream that, once ``at`` pairs are reported, has a thread send SIGTERM to the fill's
    worker and then to this process, as a Slurm walltime signals every process of a job; the main
    thread is then waiting on the worker's next case."""

    def __init__(self, at: int):
        self.at, self.pairs, self.sent = at, 0, False

    def write(self, text: str) -> int:
        import multiprocessing as mp
        import signal
        import threading
        import time

        if text.startswith("\r"):
            self.pairs += 1
            if self.pairs == self.at and not self.sent:
                self.sent = True
                workers = [c.pid for c in mp.active_children()]

                def terminate():
                    time.sleep(0.1)  # the next case has started
                    for pid in workers:
                        os.kill(pid, signal.SIGTERM)
                    os.kill(os.getpid(), signal.SIGTERM)

                threading.Thread(target=terminate, daemon=True).start()
        return len(text)

    def flush(self):
        pass


def test_sigterm_drains_the_fill_keeping_every_finished_row_and_a_rerun_completes(tmp_path, monkeypatch):
    from popcorn.bench.fill import ShardSink, drain_on_sigterm

    monkeypatch.setenv("TOY_SLOW_S", "0.01")

    shard = tmp_path / "shard"
    with drain_on_sigterm() as terminated:
        first = run(["toy:slow"], out=TerminateAfter(at=4), sink=ShardSink(shard), limit=8)
    assert terminated and first.interrupted
    bad: list = []
    kept = store.read("toy_scale", root=shard, bad=bad)
    assert not bad and len(kept) == first.measured >= 4  # every pair reported finished is written whole
    assert all(r.status == "pass" for r in kept)  # the worker, signalled too, died of nothing: no crash row
    again = run(["toy:slow"], sink=ShardSink(shard), limit=8)
    assert not again.interrupted
    assert sum(c.get("cached", 0) for c in again.counts.values()) == len(kept)  # nothing measured twice
    done = store.read("toy_scale", root=shard)
    assert len(done) == len(kept) + again.measured == 16 and all(r.status == "pass" for r in done)
    assert {(r.impl, r.case_id, r.grad) for r in kept} <= {(r.impl, r.case_id, r.grad) for r in done}


def test_cli_fill_stops_on_sigterm_to_its_process_group_and_writes_what_finished(tmp_path):
    import signal
    import threading
    import time

    shard = tmp_path / "shard"
    proc = subprocess.Popen([sys.executable, "-m", "popcorn.cli", "bench", "fill", "rms_norm", "--limit", "6",
                             "--backend", "torch", "--trials", "1", "--device", "cpu", "--out", str(shard)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "POPCORN_CACHE_DIR": str(tmp_path / "cache"),
                                 "POPCORN_BENCH_TARGET_MS": "300"})
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while "rms_norm: 2/" not in "".join(err) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGTERM)  # as Slurm does at the walltime: supervisor and worker alike
    out = proc.stdout.read()
    assert proc.wait(60) == 130, "".join(err)
    reader.join(10)
    assert "stopped by SIGTERM" in "".join(err) and "interrupted" in out
    measured = int(out.split(" case-backend pairs measured")[0].split()[-1])
    bad: list = []
    kept = store.read("rms_norm", root=shard, bad=bad)
    assert not bad and 2 <= len(kept) == measured < 6 and all(r.status == "pass" for r in kept)


def test_a_malformed_device_state_stops_the_fill_before_any_pair(monkeypatch):
    monkeypatch.setenv("POPCORN_DEVICE_STATE", "warm")
    with pytest.raises(ValueError, match="POPCORN_DEVICE_STATE='warm' is not one of primed, unprimed, off"):
        run(["torch"])
    monkeypatch.setenv("POPCORN_DEVICE_STATE", "unprimed")
    monkeypatch.setenv("POPCORN_REPRIMES", "-1")
    with pytest.raises(ValueError, match="POPCORN_REPRIMES='-1' is not a whole number"):
        run(["torch"])
    assert rows("torch") == []
