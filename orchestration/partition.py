"""One partition's fill, shared by ``reference`` and ``measurements``: seed its shard directory, run its
FillJob through the executor, and report what it holds as the asset's output, metadata and check.

Seeding is what makes a rerun cheap: rows the report store (and, for a measurement, its reference
partition) already holds are folded into the shard directory first, so the fill's planning finds them
cached when they are reusable here (exact device, torch version, fingerprints, case and gradient
mode) and measures only the rest; a measurement's backend rows then carry the cached reference's
timings (``ref_*``), while correctness still runs the reference.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

import dagster as dg

from popcorn.bench.record import Record
from popcorn.kernels import OPS
from popcorn.schema import FAILED, REFERENCE, STATUSES

from . import shards
from .execution import Executor
from .partitions import family
from .resources import ReportStoreResource, SweepSettings

CHECK = "no_failed_rows"
SHOWN = 40  # failing rows listed in a check's metadata


def check_spec(asset: str) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(CHECK, asset=asset, description="the partition's fail and crash rows (none: passed)")


def fill_partition(context, *, sweep: SweepSettings, executor: Executor, store: ReportStoreResource, op: str,
                   stratum: str, out_dir: Path, backend: str | None = None, seed_dirs: tuple[Path, ...] = ()):
    """Run the partition of ``op``'s ``stratum`` for ``backend`` (None: the reference) into ``out_dir``;
    yields the asset's Output (the shard directory) and its check result. Raises dg.Failure when the
    fill exits non-zero (its rows stay in ``out_dir``) or the backend cannot run where the fill ran."""
    the_op = OPS[op]
    impls = ({REFERENCE} if backend is None else
             {n for n in the_op.implementations if n != REFERENCE and family(n) == backend})
    if not impls:
        context.log.info(f"{op} has no {backend} implementation: nothing to measure")
        yield dg.Output(str(out_dir), metadata={"rows": 0, "note": f"{op} has no {backend} implementation"})
        yield dg.AssetCheckResult(check_name=CHECK, passed=True, metadata={"rows": 0})
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = impls | {REFERENCE}
    held = [r for r in store.open().read(op) if r.impl in wanted]
    held += [r for d in seed_dirs for r in shards.rows_in(d, op) if r.impl == REFERENCE]
    seeded = shards.seed(out_dir, held)
    job = sweep.job(context, op, (backend or REFERENCE,), stratum, out_dir)
    shards.forget_summary(out_dir)  # a summary there afterwards is this job's (no clocks compared across hosts)
    result = executor.fill(context, job)
    summary = shards.summary(out_dir)
    rows = shards.partition_rows(out_dir, op, impls, summary)
    meta = metadata(rows, summary, seeded, job, result, reference=backend is None)
    if result.returncode != 0:
        raise dg.Failure(
            description=(f"`popcorn bench fill` exited with {result.returncode}; the {len(rows)} rows it holds stay "
                         f"in {out_dir} (report_store merges them; a rerun of this partition skips them). "
                         f"Its output ended:\n{result.log[-2000:]}"), metadata=meta)
    unavailable = {n: why for n, why in (summary or {}).get("unavailable", {}).items() if n in impls}
    if unavailable and set(unavailable) == impls:
        raise dg.Failure(description=f"{backend} cannot run where the fill ran: {'; '.join(unavailable.values())}",
                         metadata=meta)
    if unavailable:
        meta["unavailable"] = dg.MetadataValue.json(unavailable)
    yield dg.Output(str(out_dir), metadata=meta)
    yield failed_rows_check(rows, severe=backend is None)


def metadata(rows: list[Record], summary: dict | None, seeded: int, job, result, reference: bool) -> dict:
    """Rows by status, what the fill did (measured, cached, gated, pruned), median speedup, device, versions."""
    by_status = Counter(r.status for r in rows)
    meta = {"rows": len(rows), **{s: by_status.get(s, 0) for s in STATUSES}, "seeded_rows": seeded,
            "shards": dg.MetadataValue.path(job.out_dir),
            "options": dg.MetadataValue.json({"limit": job.limit, "curves_only": job.curves_only,
                                              "trials": job.trials, "timeout": job.timeout,
                                              "device": (summary or {}).get("device")})}
    if summary is not None:
        counts = Counter()
        for c in summary.get("counts", []):
            if (c["impl"] == REFERENCE) == reference:
                counts.update({k: v for k, v in c.items() if k in ("cached", "gated", "pruned")})
        meta.update({"measured": summary.get("measured", 0), **{k: counts.get(k, 0) for k in ("cached", "gated",
                                                                                             "pruned")},
                     "fill_wall_s": round(summary.get("wall_s", 0.0), 1)})
    speedups = [s for s in map(speedup, rows) if s is not None]
    if speedups and not reference:
        meta["median_speedup"] = round(statistics.median(speedups), 3)
    for name, values in (("device", {r.device for r in rows}), ("torch", {r.torch for r in rows}),
                         ("backend_version", {r.backend_version or "-" for r in rows})):
        if values:
            meta[name] = ", ".join(sorted(values))
    if result.job_id:
        meta["job_id"] = result.job_id
    return meta


def speedup(r: Record) -> float | None:
    """The reference's time over this row's: the step's in gradient mode, else the forward's."""
    if r.status != "pass":
        return None
    mine, ref = (r.step_ms, r.ref_step_ms) if r.grad and r.step_ms and r.ref_step_ms else (r.fwd_ms, r.ref_fwd_ms)
    return ref / mine if mine and ref else None


def failed_rows_check(rows: list[Record], severe: bool) -> dg.AssetCheckResult:
    """Passed when no row failed or crashed; the failing rows are listed. A failing reference is invalid
    evidence for every backend (ERROR); a failing backend is evidence about that backend (WARN)."""
    bad = [r for r in rows if r.status in FAILED]
    table = "\n".join(f"| {r.impl} | {r.case} | {'grad' if r.grad else 'fwd'} | {r.status} | "
                      f"{(r.reason or '').replace('|', '/')[:120]} |" for r in bad[:SHOWN])
    meta = {"rows": len(rows), **{s: sum(r.status == s for r in rows) for s in sorted(FAILED)}}
    if bad:
        more = f"\n\n{len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        meta["failing rows"] = dg.MetadataValue.md("| impl | case | mode | status | reason |\n|---|---|---|---|---|\n"
                                                   + table + more)
    return dg.AssetCheckResult(check_name=CHECK, passed=not bad, metadata=meta,
                               severity=dg.AssetCheckSeverity.ERROR if severe else dg.AssetCheckSeverity.WARN)
