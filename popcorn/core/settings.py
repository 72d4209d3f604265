"""Every environment variable popcorn reads, in one place, read when asked (never at import time),
so a variable set after ``import popcorn`` still takes effect.

| variable | what it sets | default |
|---|---|---|
| POPCORN_BENCH=1 | every call measures its exact case first (as ``bench=True``) | off |
| POPCORN_CACHE_DIR | the user cache of this machine's measurements | $XDG_CACHE_HOME/popcorn, ~/.cache/popcorn |
| POPCORN_REPORT | the published report directory dispatch reads | the bundled popcorn/reports |
| POPCORN_STORE | the Delta report store (a path or URI) | $XDG_DATA_HOME/popcorn/store, ~/.local/share/... |
| POPCORN_BENCH_TARGET_MS | time spent measuring each quantity (precision for throughput) | 100 |
| POPCORN_LIVE_WAIT_S | how long a ``--live`` fill with nothing to measure waits for a subscriber | 5 |
| POPCORN_LANE_DIR | where fills on one device share its lanes across processes (``off``: they do not) | <tmp>/popcorn-lanes on CUDA; off on CPU |
| POPCORN_SHARED_HOLDS | the most shared-lane holds (correctness trials, warm-ups) a parallel fill grants at once | no limit |
| POPCORN_DEVICE_STATE | the device state timings are taken in: primed, unprimed (as a process alone) or off (as found) | primed |
| POPCORN_REPRIMES | re-primes in a row that fail before a timing process stops restoring the primed state (0: never) | 3 |
"""

from __future__ import annotations

import os
from pathlib import Path


class Settings:
    """The values, each read from the environment when asked: a call's slow path, the store and the
    timer ask for one or two, and the home directory lookup behind the defaults costs ~20 us."""

    __slots__ = ("bench_target_ms",)

    def __init__(self, bench_target_ms: float):
        self.bench_target_ms = bench_target_ms

    @property
    def bench(self) -> bool:
        return bench_mode()

    @property
    def cache_root(self) -> Path:
        env = os.environ
        return Path(env.get("POPCORN_CACHE_DIR") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                    / "popcorn")

    @property
    def report_dir(self) -> Path | None:
        return Path(os.environ["POPCORN_REPORT"]) if os.environ.get("POPCORN_REPORT") else None

    @property
    def store(self) -> str:
        env = os.environ
        return env.get("POPCORN_STORE") or str(Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
                                               / "popcorn" / "store")

    @property
    def lane_dir(self) -> str | None:
        """POPCORN_LANE_DIR as given (None: unset); :mod:`popcorn.bench.device_lane` applies the defaults."""
        return os.environ.get("POPCORN_LANE_DIR") or None

    def __repr__(self) -> str:
        names = ("bench", "cache_root", "report_dir", "store", "bench_target_ms", "lane_dir")
        return "Settings(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in names) + ")"


def bench_mode() -> bool:
    """POPCORN_BENCH=1 alone: the op call's slow path asks on every undecided call."""
    return os.environ.get("POPCORN_BENCH") == "1"


def live_wait_s(default: float) -> float:
    """POPCORN_LIVE_WAIT_S, else ``default``; a malformed number is refused, naming the variable."""
    raw = os.environ.get("POPCORN_LIVE_WAIT_S")
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ValueError(f"POPCORN_LIVE_WAIT_S={raw!r} is not a number of seconds; unset it or give e.g. 5") from None


def shared_holds() -> int | None:
    """POPCORN_SHARED_HOLDS, a positive whole number, else None (no limit); anything else is refused, naming
    the variable. Kernels of several processes time-slice the device rather than run together, so more
    holds at once may cost more in switches than they gain in overlap (a parallel fill's knob to measure)."""
    raw = os.environ.get("POPCORN_SHARED_HOLDS")
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"POPCORN_SHARED_HOLDS={raw!r} is not a positive whole number; unset it (no limit) or "
                         "give e.g. 4")
    return n


PRIMED, UNPRIMED, OFF = "primed", "unprimed", "off"
DEVICE_STATES = (PRIMED, UNPRIMED, OFF)


def device_state() -> str:
    """POPCORN_DEVICE_STATE: which of a device's two states timings are taken in (:mod:`popcorn.bench.device_state`):
    ``primed`` (another CUDA context opened after the timing process's own; the default), ``unprimed`` (a process
    alone, as training runs: a graph destroyed first) or ``off`` (as found: no context opened, nothing undone).
    Anything else is refused."""
    raw = os.environ.get("POPCORN_DEVICE_STATE") or PRIMED
    if raw not in DEVICE_STATES:
        raise ValueError(f"POPCORN_DEVICE_STATE={raw!r} is not one of {', '.join(DEVICE_STATES)}; unset it ({PRIMED}) "
                         f"or give one of those")
    return raw


def reprimes(default: int) -> int:
    """POPCORN_REPRIMES, a whole number >= 0, else ``default``; anything else is refused, naming the variable.
    How many re-primes in a row that do not bring a timing process's canary back it tries before it stops
    (:func:`popcorn.bench.device_state.settle`; each opens a CUDA context while the device is held, 0.1-0.3 s)."""
    raw = os.environ.get("POPCORN_REPRIMES")
    if not raw:
        return default
    if not raw.isdigit():
        raise ValueError(f"POPCORN_REPRIMES={raw!r} is not a whole number >= 0; unset it ({default}) or give e.g. 0 "
                         "(never re-prime)")
    return int(raw)


def settings() -> Settings:
    """The settings now; a malformed number is refused here, naming the variable."""
    raw = os.environ.get("POPCORN_BENCH_TARGET_MS")
    try:
        target = float(raw or 100)
    except ValueError:
        raise ValueError(f"POPCORN_BENCH_TARGET_MS={raw!r} is not a number of milliseconds; "
                         "unset it or give e.g. 100") from None
    return Settings(target)
