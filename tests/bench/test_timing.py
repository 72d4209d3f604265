"""The sampler's stopping rules (popcorn.bench.timing.sampled), on a fake clock: no wall-clock margins."""

import pytest

from popcorn.bench.timing import MIN_REPS, sampled, settled


class Clock:
    """A clock that advances only when a batch runs: ``per_sample_ms`` for each sample drawn."""

    def __init__(self, per_sample_ms: float):
        self.now, self.per_sample_ms, self.batches = 0.0, per_sample_ms, []

    def __call__(self) -> float:
        return self.now

    def batch(self, values):
        values = iter(values)

        def draw(n: int) -> list[float]:
            self.batches.append(n)
            self.now += n * self.per_sample_ms / 1e3
            return [next(values) for _ in range(n)]
        return draw


def noisy():
    while True:  # a spread of 2x around 1.0 never settles within 2%
        yield from (0.5, 1.0, 1.5)


def test_settled_samples_stop_after_the_first_batch():
    clock = Clock(per_sample_ms=0.01)
    samples = sampled(clock.batch(iter(lambda: 1.0, None)), budget=2000, target_ms=100, clock=clock)
    assert len(samples) == 2 * MIN_REPS and clock.batches == [2 * MIN_REPS]


def test_unsettled_samples_double_until_the_budget_of_samples():
    clock = Clock(per_sample_ms=0.001)  # fast samples: the budget of samples ends it, not the time
    samples = sampled(clock.batch(noisy()), budget=200, target_ms=100, clock=clock)
    assert len(samples) == 200
    assert clock.batches[:3] == [20, 20, 40]


def test_a_slow_host_ends_sampling_at_the_target_wall_time():
    # 1 ms of wall time per sample (a launch-bound call whose device time is far less): the sample budget
    # says 2000, the 100 ms target allows about 100
    clock = Clock(per_sample_ms=1.0)
    samples = sampled(clock.batch(noisy()), budget=2000, target_ms=100, clock=clock)
    assert 95 <= len(samples) <= 110, len(samples)
    assert clock.now * 1e3 <= 110  # no batch ran far past the target


def test_at_least_the_first_batch_is_drawn_however_slow():
    clock = Clock(per_sample_ms=50.0)
    samples = sampled(clock.batch(noisy()), budget=2000, target_ms=100, clock=clock)
    assert len(samples) == 2 * MIN_REPS


def test_paired_samples_go_on_until_every_column_settles():
    # a forward and step replayed by turns: the steady forward alone does not end sampling
    clock = Clock(per_sample_ms=0.001)
    steps = noisy()
    samples = sampled(clock.batch((1.0, next(steps)) for _ in iter(int, 1)), budget=200, target_ms=100, clock=clock,
                      done=lambda got: all(settled([g[i] for g in got]) for i in (0, 1)))
    assert len(samples) == 200 and all(len(s) == 2 for s in samples)
    clock = Clock(per_sample_ms=0.001)
    samples = sampled(clock.batch((1.0, 2.0) for _ in iter(int, 1)), budget=200, target_ms=100, clock=clock,
                      done=lambda got: all(settled([g[i] for g in got]) for i in (0, 1)))
    assert len(samples) == 2 * MIN_REPS


def test_prime_is_skipped_on_cpu_and_survives_a_machine_without_a_driver():
    import torch

    from popcorn.bench import device_state

    assert device_state.prime(torch.device("cpu")) is False
    # no libcuda here: the helper fails and the fill goes on unprimed, once per device
    device_state._primed.discard(torch.device("cuda", 0))
    if not torch.cuda.is_available():
        with pytest.warns(RuntimeWarning, match="times unprimed"):  # said once: the rows go on unprimed
            assert device_state.prime(torch.device("cuda", 0)) is False
    assert torch.device("cuda", 0) in device_state._primed
    assert device_state.prime(torch.device("cuda", 0)) is False  # once per process
    if not torch.cuda.is_available():  # nothing to undo without a driver
        assert device_state.unprime(torch.device("cuda", 0)) is False


def test_clock_up_spins_until_the_clock_is_up_or_stops_rising():
    import torch

    from popcorn.bench.timing import CLOCK_UP, clock_up

    dev = torch.device("cpu")
    t = [0.0]

    def run(readings):
        readings, spins = iter(readings), []

        def spin(_):
            t[0] += 0.002
            spins.append(t[0])
            return True
        wall = (lambda: t[0])
        return clock_up(dev, lambda _: next(readings), spin, wall), len(spins)

    assert run([(1980, 1980)]) == (False, 0)  # already up: not one spin
    assert clock_up(dev, lambda _: None) is False  # no NVML: nothing to wait for
    assert run([(345, 1980), (900, 1980), (1500, 1980), (1800, 1980)]) == (True, 3)  # 1800 >= 90% of 1980
    # a capped clock (power, heat) that stops rising: CLOCK_UP[1] ms after its last rise, not the whole cap
    plateau = [(345, 1980), (1400, 1980)] + [(1400, 1980)] * 1000
    assert run(plateau) == (True, 1 + int(CLOCK_UP[1] / 2))
    assert run([(345, 1980)] * 1000)[1] <= int(CLOCK_UP[2] / 2) + 1  # never rising: at most the cap
    assert clock_up(dev, lambda _: (345, 1980), lambda _: False) is False  # no spin kernel: no wait


def test_a_process_device_bytes_are_nvmls_count_for_it_or_none(monkeypatch):
    import types

    import torch

    from popcorn.bench import timing

    dev = torch.device("cuda", 7)
    procs = [types.SimpleNamespace(pid=10, usedGpuMemory=5 * 2**30), types.SimpleNamespace(pid=11, usedGpuMemory=None)]
    fake = types.SimpleNamespace(nvmlDeviceGetComputeRunningProcesses=lambda handle: procs)
    monkeypatch.setitem(timing._nvml, dev, (fake, "handle", 1980))
    assert timing.process_bytes(dev, 10) == 5 * 2**30
    assert timing.process_bytes(dev, 11) is None  # NVML could not say (no permission)
    assert timing.process_bytes(dev, 12) is None  # not listed (a container hides it)
    monkeypatch.setitem(timing._nvml, dev, None)
    assert timing.process_bytes(dev, 10) is None  # no NVML


class Device:
    """What settle keys its state by (a timer's ``device``), with the canaries it will time in turn."""

    def __init__(self, *canaries):
        self.device, self.canaries, self.opened = object(), list(canaries), 0

    def measure(self, timer):
        assert timer is self
        return self.canaries.pop(0)

    def reopen(self, device, fails=False):
        assert device is self.device
        self.opened += 1
        return "exit status 1" if fails else None


def settle(dev, fails=False):
    from popcorn.bench.device_state import settle

    return settle(dev, measure=dev.measure, reopen=lambda d: dev.reopen(d, fails))


def test_settle_primes_in_a_process_first_hold_and_restores_the_state_where_it_was_lost():
    dev = Device(1.47, 1.29, 1.30, 1.47, 1.29, 1.31)
    assert settle(dev) == 1.29 and dev.opened == 1  # the first hold: another context opened, the canary again
    assert settle(dev) == 1.30 and dev.opened == 1  # within STATES_APART of the fastest: nothing to do
    assert settle(dev) == 1.29 and dev.opened == 2  # lost (1.47): re-primed in the hold, timed again
    assert settle(dev) == 1.31 and dev.opened == 2 and not dev.canaries


def test_settle_leaves_a_device_of_one_state_alone_after_its_first_hold():
    dev = Device(1.47, 1.47, 1.46, 1.48)
    assert settle(dev) == 1.47 and dev.opened == 1
    assert [settle(dev), settle(dev)] == [1.46, 1.48] and dev.opened == 1


def test_settle_stops_re_priming_a_process_whose_re_primes_do_not_bring_the_state_back():
    from popcorn.bench.device_state import REPRIMES

    dev = Device(1.29, 1.29, *[1.47, 1.47] * REPRIMES, 1.47)
    settle(dev)
    assert [settle(dev) for _ in range(REPRIMES)] == [1.47] * REPRIMES and dev.opened == 1 + REPRIMES
    assert settle(dev) == 1.47 and dev.opened == 1 + REPRIMES and not dev.canaries  # no more tries


def test_settle_with_a_failing_helper_times_on_and_counts_the_failure():
    from popcorn.bench.device_state import REPRIMES

    dev = Device(1.29, *[1.47] * (REPRIMES + 1))
    with pytest.warns(RuntimeWarning, match="times unprimed"):  # the first hold's priming failed: said once
        assert settle(dev, fails=True) == 1.29  # no second canary when the helper failed
    assert [settle(dev, fails=True) for _ in range(REPRIMES + 1)] == [1.47] * (REPRIMES + 1)
    assert dev.opened == 1 + REPRIMES and not dev.canaries


def test_settle_without_a_canary_does_nothing():
    dev = Device(None)
    assert settle(dev) is None and dev.opened == 0


def test_settle_with_reprimes_off_primes_only_in_the_first_hold(monkeypatch):
    monkeypatch.setenv("POPCORN_REPRIMES", "0")
    dev = Device(1.47, 1.29, 1.47, 1.47)
    assert [settle(dev), settle(dev), settle(dev)] == [1.29, 1.47, 1.47] and dev.opened == 1


def test_settle_unprimed_undoes_the_state_every_hold_and_never_opens_a_context(monkeypatch):
    from popcorn.bench.device_state import settle

    monkeypatch.setenv("POPCORN_DEVICE_STATE", "unprimed")
    dev, lost = Device(1.47, 1.29, 1.47), []
    got = [settle(dev, measure=dev.measure, reopen=dev.reopen, undo=lost.append) for _ in range(3)]
    assert got == [1.47, 1.29, 1.47] and lost == [dev.device] * 3 and dev.opened == 0  # as found, after undoing


def test_settle_off_times_the_canary_as_found(monkeypatch):
    from popcorn.bench.device_state import settle

    monkeypatch.setenv("POPCORN_DEVICE_STATE", "off")
    dev, lost = Device(1.47, 1.29), []
    assert [settle(dev, measure=dev.measure, reopen=dev.reopen, undo=lost.append) for _ in range(2)] == [1.47, 1.29]
    assert dev.opened == 0 and lost == []
