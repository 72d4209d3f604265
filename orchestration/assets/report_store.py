"""``report_store``: the sweep's shards merged into the Delta report store, and ``release_check`` on it."""

from collections import Counter

import dagster as dg

from popcorn.bench import audit
from popcorn.kernels import OPS

from ..resources import ReportStoreResource, SweepSettings
from ..shards import merge_new
from .measurements import measurements
from .reference import reference

STORE_POOL = "report_store"  # one writer: `popcorn sweep` sets its limit to 1


@dg.asset(deps=[reference, measurements], pool=STORE_POOL, group_name="sweep")
def report_store(context: dg.AssetExecutionContext, sweep: SweepSettings,
                 store: ReportStoreResource) -> dg.MaterializeResult:
    """Every shard the sweep's partitions wrote since the last merge, folded into the store with its
    merge rule (as ``popcorn bench merge DIR`` does); failed partitions' rows included."""
    target = store.open()
    merged = merge_new(sweep.root(context), target)
    for path, line, why in merged["skipped"]:
        context.log.warning(f"skipped {path}:{line} ({why})")
    m = merged["metrics"]
    by_status = Counter(r.status for r in merged["rows"])
    return dg.MaterializeResult(metadata={
        "store": dg.MetadataValue.path(target.uri), "store_version": m.get("version"),
        "files": len(merged["files"]), "rows_merged": len(merged["rows"]),
        "inserted": m.get("num_target_rows_inserted", 0), "updated": m.get("num_target_rows_updated", 0),
        "by_status": dg.MetadataValue.json(dict(by_status))})


@dg.asset_check(asset=report_store, description="`popcorn bench check --release` on the store: missing, stale, "
                "failing and untimed pairs of every op with rows")
def release_check(store: ReportStoreResource) -> dg.AssetCheckResult:
    records = store.open().read()
    result = audit.check(records, OPS, release=True)
    kinds = Counter(f.kind for f in result.findings if f.blocking)
    table = "\n".join(f"| {f.op} | {f.impl} | {f.kind} | {f.detail.replace('|', '/')[:160]} |"
                      for f in result.findings[:200])
    return dg.AssetCheckResult(passed=result.passed, metadata={
        "records": len(records), "pairs": result.tally.pairs, "failing_pairs": len(result.failing),
        **{k: kinds.get(k, 0) for k in (audit.MISSING, audit.STALE, audit.NO_PASS, audit.NO_TIMING, audit.CURVES,
                                        audit.UNCLEAN)},
        "findings": dg.MetadataValue.md("| op | impl | finding | detail |\n|---|---|---|---|\n" + table),
        "verdict": audit.format_check(result, OPS).splitlines()[-1]})
