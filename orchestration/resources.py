"""The resources the sweep's assets are given: the fill options with the sweep's directory, and the store.

A sweep's options (``popcorn sweep submit --limit/--curves-only/--reps/--timeout``, or tags added in
the UI's launch dialog) reach every run it launches as run tags, ``popcorn/<option>``; they override
the resource's configured defaults for that run.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from popcorn.bench.delta import ReportStore

from .execution import FillJob

TAG = "popcorn/"
OPTIONS = ("limit", "curves_only", "trials", "timeout")  # the fill options a run's tags may set
SWEEP_DIR = "popcorn-sweep"  # under the instance's storage: the partitions' shard directories


def tag(option: str) -> str:
    return f"{TAG}{option.replace('_', '-')}"


class SweepSettings(dg.ConfigurableResource):
    """How each partition's fill runs and where its shards go."""

    work_dir: str | None = None  # the partitions' shard directories (default: <instance storage>/popcorn-sweep)
    limit: int | None = None  # a sample of N planned cases per partition
    curves_only: bool = False  # the named curves alone (a release fill)
    trials: int = 10  # correctness trials per case (`popcorn sweep --reps`)
    timeout: float = 300.0  # the watchdog floor per case, room for a first compile
    device: str | None = None  # cuda or cpu (default: cuda when the fill's machine has one)
    workers: int | None = None  # cases side by side within one partition's fill

    def options(self, context) -> dict:
        """The fill options of this run: the configured ones, overridden by the run's ``popcorn/*`` tags."""
        tags = context.run.tags if context.run is not None else {}
        given = {"limit": self.limit, "curves_only": self.curves_only, "trials": self.trials,
                 "timeout": self.timeout}
        for name in OPTIONS:
            text = tags.get(tag(name))
            if text is not None:
                given[name] = _parse(name, text)
        return given

    def root(self, context) -> Path:
        return Path(self.work_dir) if self.work_dir else Path(context.instance.storage_directory()) / SWEEP_DIR

    def job(self, context, op: str, backends: tuple[str, ...], stratum: str, out_dir: Path) -> FillJob:
        return FillJob(ops=(op,), backends=backends, strata=(stratum,), out_dir=str(out_dir), device=self.device,
                       workers=self.workers, **self.options(context))


def _parse(name: str, text: str):
    try:
        if name == "curves_only":
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if name == "limit":
            return None if text.lower() in ("", "none") else int(text)
        return int(text) if name == "trials" else float(text)
    except ValueError:
        raise dg.Failure(f"run tag {tag(name)}={text!r} is no valid {name}") from None


class ReportStoreResource(dg.ConfigurableResource):
    """The Delta report store the sweep merges into (``uri``; default ``$POPCORN_STORE``)."""

    uri: str | None = None

    def open(self) -> ReportStore:
        return ReportStore(self.uri)
