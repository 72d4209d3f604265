"""Where a partition's fill runs: the interface every executor resource implements."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import dagster as dg


@dataclass(frozen=True)
class FillJob:            # one partition's work, as `popcorn bench fill` arguments
    ops: tuple[str, ...]; backends: tuple[str, ...]; strata: tuple[str, ...]
    out_dir: str          # a shard directory (ShardSink) the job writes <op>.jsonl into
    limit: int | None = None; curves_only: bool = False; trials: int = 10; timeout: float = 300.0
    device: str | None = None; workers: int | None = None

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "popcorn.cli", "bench", "fill", *self.ops]
        for b in self.backends:
            argv += ["--backend", b]
        for s in self.strata:
            argv += ["--stratum", s]
        argv += ["--out", self.out_dir, "--trials", str(self.trials), "--timeout", str(self.timeout)]
        if self.limit is not None:
            argv += ["--limit", str(self.limit)]
        if self.curves_only:
            argv.append("--curves-only")
        if self.device:
            argv += ["--device", self.device]
        if self.workers is not None:
            argv += ["--workers", str(self.workers)]
        return argv


@dataclass
class FillResult:
    returncode: int; out_dir: str; job_id: str | None = None; log: str = ""


class Executor(dg.ConfigurableResource):
    def fill(self, context, job: FillJob) -> FillResult: raise NotImplementedError
