"""``popcorn sweep``: the sweep as Dagster asset backfills, launched and followed through the instance.

A sweep is one backfill of the partitions its options select (ops, strata, phases: ``reference`` and
backend families) that are not yet materialized with options at least as wide, plus ``report_store``;
``resume`` launches another backfill, of the same sweep, for what is still missing. One sweep runs at a
time. The instance is ``$DAGSTER_HOME`` (default ``~/.local/share/popcorn/dagster``); a Dagster daemon
works the backfills (``dagster dev``'s, or one :mod:`orchestration.supervisor` keeps for the sweep).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.execution.backfill import BulkActionsFilter, BulkActionStatus, PartitionBackfill
from dagster._core.utils import make_new_backfill_id
from dagster._time import get_current_timestamp

from popcorn.kernels import OPS

from .assets.reference import GPU_POOL
from .assets.report_store import STORE_POOL
from .partitions import applies, case_keys, family, measurement_key, split_case
from .resources import tag

SWEEP = "popcorn/sweep"  # every backfill of a sweep: the id of its first backfill
RESUMES = "popcorn/resumes"  # a resume's backfill: the backfill it resumes
MERGES = "popcorn/merges-after"  # the merge launched after a backfill that ended with failures
EXECUTOR = "popcorn/executor"
DEVICE = "popcorn/device-name"  # a local sweep's device: partitions materialized on another are not done
NODES = "popcorn/nodes"
IMAGE = "popcorn/container-image"
REFERENCE_PHASE = "reference"
MAX_NODES, DEFAULT_NODES, GPUS_PER_NODE = 10, 6, 8
ACTIVE = (BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING)
ASSETS = {name: dg.AssetKey(name) for name in ("case_plan", "reference", "measurements", "report_store")}
DAGSTER_YAML = """\
# written by `popcorn sweep` for its instance
telemetry:
  enabled: false
concurrency:
  pools:
    granularity: run  # a run waits in the queue, not as a process, until its pool has a slot
  runs:
    max_concurrent_runs: -1  # the gpu pool limits the fills (Dagster's default of 10 would cap a Slurm sweep)
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1  # a freed GPU slot takes its next partition within a second, not five
"""


def home() -> Path:
    """The Dagster instance's home: ``$DAGSTER_HOME``, else ``$XDG_DATA_HOME/popcorn/dagster``."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "popcorn" / "dagster"


def instance() -> dg.DagsterInstance:
    """The instance at :func:`home` (created with a dagster.yaml of the sweep's when there is none)."""
    root = home()
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "dagster.yaml").exists():
        (root / "dagster.yaml").write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(root)
    return dg.DagsterInstance.get()


@dataclass
class Options:
    """What ``submit`` selects and how its fills run (carried by the backfill's tags to every run)."""

    local: bool = False
    nodes: int = DEFAULT_NODES
    phases: list[str] | None = None  # reference and backend families (default: all, installed ones with --local)
    ops: list[str] | None = None
    strata: list[str] | None = None
    curves_only: bool = False
    reps: int = 10
    limit: int | None = None
    timeout: float = 300.0
    container_image: str | None = None
    everything: bool = False  # also partitions already materialized (each then measures only what it lacks)
    device: str | None = None  # the device name a local sweep's rows carry (Slurm: not known here)

    def tags(self) -> dict[str, str]:
        tags = {EXECUTOR: "local" if self.local else "slurm", tag("curves_only"): str(self.curves_only).lower(),
                tag("trials"): str(self.reps), tag("timeout"): f"{self.timeout:g}",
                tag("limit"): "none" if self.limit is None else str(self.limit)}
        if not self.local:
            tags[NODES] = str(self.nodes)
        if self.container_image:
            tags[IMAGE] = self.container_image
        if self.device:
            tags[DEVICE] = self.device
        return tags

    def fill_options(self) -> dict:
        return fill_options_of(self.tags())


def fill_options_of(tags: dict) -> dict:
    limit = tags.get(tag("limit"), "none")
    return {"limit": None if limit == "none" else int(limit), "curves_only": tags.get(tag("curves_only")) == "true",
            "trials": int(tags.get(tag("trials"), 10)), "device": tags.get(DEVICE)}


def local_device() -> str:
    """The device name this machine's fills give their rows (its first visible GPU, else its CPU)."""
    import torch

    from popcorn.bench.api import device_name

    return device_name(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def phases_of(options: Options) -> tuple[list[str], dict[str, str]]:
    """(phases to run, phase -> why it is skipped). A backend family is skipped on ``--local`` when no
    implementation of it can load here; an unknown phase is a ValueError naming the known ones."""
    known = [REFERENCE_PHASE] + list(dict.fromkeys(family(n) for op in OPS.values() for n in op.implementations
                                                   if n != "torch"))
    wanted = options.phases or known
    unknown = [p for p in wanted if p not in known]
    if unknown:
        raise ValueError(f"unknown phase(s) {', '.join(unknown)}; phases: {', '.join(known)}")
    skipped = {}
    if options.local:
        for p in wanted[:]:
            if p == REFERENCE_PHASE:
                continue
            impls = [i for op in OPS.values() for n, i in op.implementations.items() if family(n) == p]
            if not any(i.backend.available for i in impls):
                skipped[p] = impls[0].backend.problem()
    return [p for p in wanted if p not in skipped], skipped


def selected_cases(options: Options) -> list[str]:
    unknown = [o for o in options.ops or () if o not in OPS]
    if unknown:
        raise ValueError(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(sorted(OPS))}")
    keys = case_keys(tuple(options.ops) if options.ops else None, options.curves_only)
    if options.strata:
        keys = tuple(k for k in keys if split_case(k)[1] in options.strata)
        if not keys:
            raise ValueError(f"no selected op has stratum {', '.join(options.strata)} (`popcorn bench plan OP "
                             "--summary` lists an op's strata)")
    return list(keys)


def covers(done: dict | None, wanted: dict) -> bool:
    """Whether a partition materialized with options ``done`` holds what ``wanted`` asks for: all cases
    (or the same sample), every case when ``wanted`` is more than the curves, at least as many trials, and
    on the wanted device when one is named."""
    if done is None:
        return False
    return ((done.get("limit") is None or done.get("limit") == wanted["limit"])
            and (not done.get("curves_only") or wanted["curves_only"])
            and int(done.get("trials") or 0) >= wanted["trials"]
            and (wanted.get("device") is None or done.get("device") == wanted["device"]))


def _options_by_partition(inst: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, dict | None]:
    """The fill options of each partition's latest materialization (None where none were recorded)."""
    latest: dict[str, dict | None] = {}
    cursor = None
    while True:
        page = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000, cursor=cursor)
        for record in page.records:
            m = record.asset_materialization
            if m is not None and m.partition is not None and m.partition not in latest:
                options = m.metadata.get("options")
                latest[m.partition] = options.value if options is not None else None
        if not page.has_more:
            return latest
        cursor = page.cursor


def targets(inst: dg.DagsterInstance, options: Options) -> tuple[list[AssetKeyPartitionKey], dict[str, str]]:
    """The asset partitions a submit launches (report_store last, when there is anything), and the skipped
    phases with why. A measurement launched brings its case's reference partition when that is not done
    (a measurement reads it), whether or not the reference phase was asked for."""
    phases, skipped = phases_of(options)
    cases = selected_cases(options)
    wanted = options.fill_options()

    def todo(key: dg.AssetKey, partitions: list[str]) -> list[str]:
        done = {} if options.everything else _options_by_partition(inst, key)
        return [p for p in partitions if not covers(done.get(p), wanted)]

    measure = todo(ASSETS["measurements"], [str(measurement_key(b, c)) for b in phases if b != REFERENCE_PHASE
                                            for c in cases if applies(b, c)])
    needed = set(cases) if REFERENCE_PHASE in phases else {p.split("|", 1)[1] for p in measure}
    refs = todo(ASSETS["reference"], [c for c in cases if c in needed])
    out = ([AssetKeyPartitionKey(ASSETS["reference"], p) for p in refs]
           + [AssetKeyPartitionKey(ASSETS["measurements"], p) for p in measure])
    if out:
        out.append(AssetKeyPartitionKey(ASSETS["report_store"], None))
    return out, skipped


def sweeps(inst: dg.DagsterInstance, limit: int = 100) -> list[PartitionBackfill]:
    """The sweep's backfills, newest first."""
    return [b for b in inst.get_backfills(limit=limit) if SWEEP in b.tags]


def active(inst: dg.DagsterInstance) -> PartitionBackfill | None:
    return next((b for b in inst.get_backfills(filters=BulkActionsFilter(statuses=list(ACTIVE)), limit=100)
                 if SWEEP in b.tags), None)


def find(inst: dg.DagsterInstance, run: str | None) -> PartitionBackfill | None:
    """The newest backfill of sweep ``run`` (a sweep's or a backfill's id), or of the newest sweep."""
    for b in sweeps(inst):
        if run is None or run in (b.backfill_id, b.tags.get(SWEEP)):
            return b
    return None


def launch(inst: dg.DagsterInstance, parts: list[AssetKeyPartitionKey], tags: dict[str, str],
           title: str) -> PartitionBackfill:
    """Add an asset backfill of ``parts`` to the instance (the daemon runs it); a new sweep unless ``tags``
    name one."""
    from .definitions import defs

    backfill_id = make_new_backfill_id()
    tags = {SWEEP: backfill_id, **tags}
    subset = AssetGraphSubset.from_asset_partition_set(set(parts), defs.resolve_asset_graph())
    backfill = PartitionBackfill.from_asset_graph_subset(
        backfill_id=backfill_id, backfill_timestamp=get_current_timestamp(), tags=tags,
        dynamic_partitions_store=inst, asset_graph_subset=subset, title=title,
        description="launched by `popcorn sweep`", run_config=None)
    inst.add_backfill(backfill)
    return backfill


def set_pools(inst: dg.DagsterInstance, gpus: int) -> None:
    """One fill per GPU at a time, one writer of the store."""
    inst.event_log_storage.set_concurrency_slots(GPU_POOL, gpus)
    inst.event_log_storage.set_concurrency_slots(STORE_POOL, 1)


def targeted(backfill: PartitionBackfill) -> list[AssetKeyPartitionKey]:
    data = backfill.asset_backfill_data
    return list(data.target_subset.iterate_asset_partitions()) if data is not None else []


def unfinished(inst: dg.DagsterInstance, backfill: PartitionBackfill) -> list[AssetKeyPartitionKey]:
    """The partitions of ``backfill`` whose asset is not materialized with options as wide as the sweep's."""
    wanted = fill_options_of(backfill.tags)
    done = {key: _options_by_partition(inst, key) for key in (ASSETS["reference"], ASSETS["measurements"])}
    out = [p for p in targeted(backfill) if p.asset_key in done and not covers(done[p.asset_key].get(p.partition_key),
                                                                                 wanted)]
    return out + [AssetKeyPartitionKey(ASSETS["report_store"], None)] if out else out


UNFINISHED_RUNS = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                   dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def abandon(inst: dg.DagsterInstance, backfill: PartitionBackfill, why: str) -> int:
    """End an active backfill that nothing works any more (its supervisor and daemon were killed, the
    machine restarted): its unfinished runs are reported failed (started ones died with the daemon's
    code server) or canceled (queued ones would run beside the resume's) and their pool slots freed, then the
    backfill is canceled.
    What its fills finished stays in their shards and the store; returns the runs it ended."""
    runs = inst.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id},
                                       statuses=list(UNFINISHED_RUNS)))
    for run in runs:
        if run.status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED):
            inst.report_run_canceled(run, message=why)
        else:
            inst.report_run_failed(run, message=why)
        inst.event_log_storage.free_concurrency_slots_for_run(run.run_id)  # the GPU slots it claimed
    inst.update_backfill(backfill.with_status(BulkActionStatus.CANCELED).with_end_timestamp(get_current_timestamp()))
    return len(runs)


def merge_after(inst: dg.DagsterInstance, backfill: PartitionBackfill) -> PartitionBackfill | None:
    """After a backfill that ended with failures its merge never ran: launch it alone, so the rows that
    were measured reach the store (a failed partition's too). None when there is nothing to merge."""
    wanted = AssetKeyPartitionKey(ASSETS["report_store"], None)
    if backfill.status == BulkActionStatus.COMPLETED_SUCCESS or wanted not in targeted(backfill):
        return None
    if MERGES in backfill.tags or any(b.tags.get(MERGES) == backfill.backfill_id for b in sweeps(inst)):
        return None
    data = backfill.asset_backfill_data
    if data is not None and wanted in set(data.materialized_subset.iterate_asset_partitions()):
        return None
    tags = {k: v for k, v in backfill.tags.items() if k.startswith("popcorn/") and k != RESUMES}
    return launch(inst, [wanted], {**tags, MERGES: backfill.backfill_id}, "popcorn sweep: merge what finished")
