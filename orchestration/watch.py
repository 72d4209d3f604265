"""Following a sweep: per-phase progress (reference, each backend family, the merge) from its runs.

Watching only reads the instance: stopping the watcher stops nothing else.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill

from . import sweep
from .supervisor import supervisor_alive

WIDTH = 30
POLL_S = 2.0
PRINT_EVERY_S = 30.0  # without a terminal, a snapshot this often (and at every change of phase counts)
DONE = {dg.DagsterRunStatus.SUCCESS}
FAILED = {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
RUNNING = {dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING}


@dataclass
class Phase:
    name: str
    total: int = 0
    counts: Counter = field(default_factory=Counter)  # done, failed, running, queued

    def bar(self) -> str:
        done, failed = self.counts["done"], self.counts["failed"]
        filled = WIDTH * done // self.total if self.total else WIDTH
        broken = WIDTH * failed // self.total if self.total else 0
        bar = "#" * filled + "x" * broken + "-" * (WIDTH - filled - broken)
        extra = ", ".join(f"{n} {k}" for k in ("running", "queued", "failed") if (n := self.counts[k]))
        return f"  {self.name:<12} [{bar}] {done}/{self.total}" + (f"  ({extra})" if extra else "")


def phase_of(part) -> str:
    if part.asset_key == sweep.ASSETS["measurements"]:
        return str(part.partition_key).split("|")[0]  # backend|case: dimensions sorted by name
    return {"reference": "reference", "report_store": "merge", "case_plan": "plan"}[part.asset_key.path[-1]]


def progress(inst: dg.DagsterInstance, backfill: PartitionBackfill) -> list[Phase]:
    """Each phase's targeted partitions and where their latest runs stand."""
    phases: dict[str, Phase] = {}
    for part in sweep.targeted(backfill):
        phases.setdefault(phase_of(part), Phase(phase_of(part))).total += 1
    latest: dict[tuple, dg.DagsterRun] = {}
    for run in inst.get_runs(filters=dg.RunsFilter.for_backfill(backfill.backfill_id)):  # newest first
        partition = run.tags.get("dagster/partition")
        for key in run.asset_selection or ():
            latest.setdefault((key, partition), run)
    for (key, partition), run in latest.items():
        name = phase_of(AssetKeyPartitionKey(key, partition))
        if name in phases:
            state = ("done" if run.status in DONE else "failed" if run.status in FAILED else
                     "running" if run.status in RUNNING else "queued")
            phases[name].counts[state] += 1
    order = ["plan", "reference"] + sorted(n for n in phases if n not in ("plan", "reference", "merge")) + ["merge"]
    return [phases[n] for n in order if n in phases]


def render(inst: dg.DagsterInstance, backfill: PartitionBackfill) -> str:
    elapsed = (backfill.backfill_end_timestamp or time.time()) - backfill.backfill_timestamp
    head = (f"sweep {backfill.tags.get(sweep.SWEEP)} backfill {backfill.backfill_id} "
            f"({backfill.tags.get(sweep.EXECUTOR, '?')}): {backfill.status.value}, {elapsed / 60:.1f} min")
    return "\n".join([head] + [p.bar() for p in progress(inst, backfill)])


def watch(inst: dg.DagsterInstance, run: str | None, out=None) -> int:
    """Print the sweep's progress until its backfill ends (0: every run succeeded); Ctrl-C stops watching only."""
    out = out or sys.stdout
    backfill = sweep.find(inst, run)
    if backfill is None:
        print("no sweep to watch: `popcorn sweep submit` starts one", file=out)
        return 1
    tty = out.isatty()
    shown, lines, printed, failed = None, 0, 0.0, False
    try:
        while True:
            backfill = inst.get_backfill(backfill.backfill_id)
            text = render(inst, backfill)
            body = (backfill.status, text.split("\n", 1)[-1])
            if tty:
                out.write(f"\x1b[{lines}F\x1b[J" if lines else "")
                out.write(text + "\n")
                lines = text.count("\n") + 1
            elif body != shown or time.monotonic() - printed > PRINT_EVERY_S:
                out.write(text + "\n")
                printed = time.monotonic()
            shown = body
            out.flush()
            if backfill.status not in sweep.ACTIVE:
                failed = failed or backfill.status != BulkActionStatus.COMPLETED_SUCCESS
                follow = _merge_after(inst, backfill) if failed else None
                if follow is None:
                    return 1 if failed else 0
                backfill, lines = follow, 0
                continue
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print("\nstopped watching; the sweep goes on (`popcorn sweep watch` follows it again)", file=out)
        return 0


def _merge_after(inst: dg.DagsterInstance, backfill: PartitionBackfill) -> PartitionBackfill | None:
    """The merge the supervisor launches after a backfill that ended with failures (waited for briefly)."""
    deadline = time.monotonic() + (15.0 if supervisor_alive(sweep.home()) else 0.0)
    while True:
        merge = next((b for b in sweep.sweeps(inst) if b.tags.get(sweep.MERGES) == backfill.backfill_id), None)
        if merge is not None or time.monotonic() > deadline:
            return merge
        time.sleep(POLL_S)
