"""The device lanes of a fill, as the process that measures sees them, and where its time goes.

A parallel fill runs several workers on one device. Correctness trials may share the device with
each other; timing must have it alone. Each worker wraps its device work in :func:`hold`:
``"shared"`` around one correctness trial, ``"exclusive"`` around timing. In a worker of a
parallel fill each hold is a request to the supervisor (:mod:`popcorn.bench.arbiter`), answered
when the lane is free; anywhere else (a serial fill, bench mode, ``compare``) it costs nothing.

:func:`phase` adds a block's seconds to :data:`clock` (warm-up, truth, trials, timing, wait), which
the worker sends back with each row, so a fill can say where its wall time went.
"""

from __future__ import annotations

import contextlib
import time

SHARED, EXCLUSIVE, RELEASE = "shared", "exclusive", "release"

_conn = None  # the worker's pipe to its supervisor, in a worker of a parallel fill
clock: dict[str, float] = {}  # phase -> seconds, for the task being measured
held: str | None = None  # the lane this process holds now (tests read it)


def connect(conn) -> None:
    """Route holds through ``conn``: the worker of a parallel fill calls this once."""
    global _conn
    _conn = conn


_nested: list[float] = []  # per open phase, the seconds of the phases inside it


@contextlib.contextmanager
def phase(name: str):
    """Adds the block's seconds to ``clock[name]``, less those of phases inside it (a lane wait
    within timing counts once, as wait)."""
    t0 = time.perf_counter()
    _nested.append(0.0)
    try:
        yield
    finally:
        spent = time.perf_counter() - t0
        clock[name] = clock.get(name, 0.0) + spent - _nested.pop()
        if _nested:
            _nested[-1] += spent


@contextlib.contextmanager
def hold(kind: str):
    """Hold the device lane ``kind`` (SHARED or EXCLUSIVE) for the block; waiting counts as ``wait``."""
    global held
    if _conn is None:
        yield
        return
    with phase("wait"):
        _conn.send(("lane", kind))
        _conn.recv()  # the go-ahead
    held = kind
    try:
        yield
    finally:
        held = None
        _conn.send(("lane", RELEASE))


def take_clock() -> dict[str, float]:
    """The phases of the task just measured, and a fresh clock for the next."""
    global clock
    done, clock = clock, {}
    return {k: round(v, 4) for k, v in done.items()}
