"""``published_report``: the store's immutable snapshot and dispatch table, materialized only on request."""

import io
from pathlib import Path

import dagster as dg

from popcorn.bench.publish import BUNDLED, PublishRefused, publish
from popcorn.kernels import OPS

from ..resources import ReportStoreResource
from .report_store import STORE_POOL, report_store


class PublishConfig(dg.Config):
    force: bool = False  # publish although the release check fails
    out: str | None = None  # directory (default: the bundled popcorn/reports)
    as_of: int | None = None  # the store version to publish (default: latest)


@dg.asset(deps=[report_store], pool=STORE_POOL, group_name="publish")
def published_report(context: dg.AssetExecutionContext, config: PublishConfig,
                     store: ReportStoreResource) -> dg.MaterializeResult:
    """What ``popcorn bench publish`` writes. The sweep never selects it: a maintainer materializes it
    after reviewing the store; it refuses while the release check fails unless ``force``."""
    log = io.StringIO()
    out = Path(config.out) if config.out else BUNDLED
    try:
        table = publish(store.open(), OPS, out, force=config.force, version=config.as_of, log=log)
    except (PublishRefused, FileNotFoundError) as e:
        raise dg.Failure(description=str(e)) from None
    context.log.info(log.getvalue())
    return dg.MaterializeResult(metadata={"dispatch_table": dg.MetadataValue.path(str(table)),
                                          "published": log.getvalue().strip()})
