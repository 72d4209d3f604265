"""``popcorn bench fill``: run the shared case plan for every installed backend, surviving crashes,
hangs and OOMs.

Planning (:mod:`popcorn.bench.tasks`) turns the plan of each op into tasks, skipping what the sink
already holds and what static gates exclude; the runner (:mod:`popcorn.bench.runner`) measures them
in a supervised worker and writes the rows to a sink (:mod:`popcorn.bench.sinks`): the user cache by
default, or a run's shard directory (``--out``). An :class:`~popcorn.bench.summary.Observer` follows the
fill beside the progress line: the live stream of ``--live`` (:mod:`popcorn.bench.live`).

SIGTERM drains a fill as Ctrl-C does (:func:`drain_on_sigterm`, which ``bench fill`` holds): a Slurm
walltime, ``scancel`` or a container stop writes every finished row and stops at the case in flight,
so rerunning the same fill measures only the rest.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

from popcorn.core.registry import Op
from popcorn.core.settings import device_state, reprimes

from .runner import interrupt_once, run
from .sinks import ShardSink, Sink, UserCacheSink  # noqa: F401 - ShardSink: the CLI's --out
from .summary import Observer, Progress, ProgressLine, Summary
from .tasks import CPU_BUDGET_BYTES, REFERENCE_TIMEOUT, Skip, device_bytes, plan_tasks, watchdog  # noqa: F401 - fill's limits

SUMMARY_FILE = "fill-summary.json"  # what a fill into a shard directory leaves beside its shards


def fill(ops: list[Op], *, backends: list[str] | None = None, limit: int | None = None, force: bool = False,
         timeout: float = 300.0, slice_spec: list[str] | None = None, trials: int = 10,
         device: str | None = None, curves: bool = False, strata: list[str] | None = None, out=sys.stderr,
         sink: Sink | None = None, workers: int | None = None, observer: Observer | None = None,
         points: int | None = None) -> Summary:
    """Measure the plan of each op for the reference and every installed backend; returns the Summary.

    ``curves``: the named curves alone (a release fill); ``points``: each curve's smallest points alone.
    ``strata``: the plan's cases of these strata alone (a sweep partition's). Pairs a static gate excludes are counted as ``gated`` and never reach the
    worker; a forward-only backend's forward is measured on gradient cases (its rows say ``grad=False``). ``sink``: where rows go and what
    counts as cached (default: the user cache). ``workers``: cases measured side by side (default:
    :func:`default_workers` for the device). ``observer``: follows the fill (the live stream): the plan,
    each pair counted, the end; of the cached rows it sees only a ``slice_spec`` fill's."""
    sink = sink or UserCacheSink()
    # a malformed POPCORN_DEVICE_STATE or POPCORN_REPRIMES stops the fill here, not as an error row per pair
    device_state()
    reprimes(0)
    try:
        try:
            tasks = plan_tasks(ops, sink.cached, backends=backends, limit=limit, slice_spec=slice_spec,
                               curves=curves, strata=strata, force=force, timeout=timeout, trials=trials,
                               device=device, points=points, out=out)
        except KeyboardInterrupt:
            return Summary(interrupted=True)
        import torch

        from .api import device_name

        device_label = device_name(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))
        line = ProgressLine(out)
        progress = line
        if observer is not None:
            # a slice is drawn whole (its cached points first); a plain fill shows only what it measures
            replay = [s.row for s in tasks.skipped if s.why == "cached" and s.row is not None] if slice_spec else []
            observer.planned(tasks, device_label, replay)
            progress = _both(line, observer)
        summary = run(tasks, sink, progress, workers=default_workers(device) if workers is None else workers)
        line.end()
        planned = [s.task if isinstance(s, Skip) else s for s in tasks.steps]
        summary.pairs = [(t.op, t.impl, t.case.case_id, t.grad) for t in planned]
        summary.unavailable = tasks.unavailable
        summary.device = device_label
        if observer is not None:
            observer.finished(summary)
        return summary
    finally:
        sink.close()


def _both(line: ProgressLine, observer: Observer) -> Progress:
    """The runner's one progress seam, feeding the terminal line and the observer."""
    def progress(task, row, summary):
        line(task, row, summary)
        observer(task, row, summary)
    return progress


def write_summary(summary: Summary, directory) -> None:
    """Leave ``summary`` as JSON in ``directory`` (a run's shards: ``merge`` reads ``*.jsonl`` alone), atomically."""
    import json
    import os
    from pathlib import Path

    path = Path(directory) / SUMMARY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{SUMMARY_FILE}.{os.getpid()}")
    tmp.write_text(json.dumps(summary.as_dict(), indent=1))
    os.replace(tmp, path)


def default_workers(device: str | None = None) -> int:
    """Parallel workers for a fill on ``device``: on a GPU, three per four host cores, at most 12; on CPU
    one, as every worker's work would land on the cores that also time. A worker spends about two thirds
    of its time compiling or waiting for the device's lanes (runs 11-12: 12 workers on 16 cores kept the
    lanes 86-91% busy; at 2.7 worker-seconds a pair outside lane waits, 8 could fill 178 pairs a minute at most)."""
    import os

    import torch

    cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    return max(1, min(12, (os.cpu_count() or 2) * 3 // 4)) if cuda else 1


@contextmanager
def drain_on_sigterm():
    """While held, the first SIGTERM raises KeyboardInterrupt in the main thread: the fill stops at the
    case in flight, writes every finished row and returns an ``interrupted`` Summary, as after Ctrl-C.
    Later SIGTERMs are ignored, so a second one (Slurm signals every process of a job, then its batch
    script may forward the signal) cannot cut the flush short. Off the main thread it does nothing."""
    with interrupt_once(signal.SIGTERM) as fired:
        yield fired
