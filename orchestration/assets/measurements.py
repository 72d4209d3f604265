"""``measurements``: a backend's rows per case partition, reusing the case's reference rows."""

from pathlib import Path

import dagster as dg

from ..execution import Executor
from ..partition import check_spec, fill_partition
from ..partitions import MEASUREMENTS, TO_REFERENCE, split_case
from ..resources import ReportStoreResource, SweepSettings
from ..shards import measurement_dir
from .reference import GPU_POOL


@dg.asset(partitions_def=MEASUREMENTS, pool=GPU_POOL, ins={"reference": dg.AssetIn(partition_mapping=TO_REFERENCE)},
          check_specs=[check_spec("measurements")], group_name="sweep")
def measurements(context: dg.AssetExecutionContext, reference: str, sweep: SweepSettings, executor: Executor,
                 store: ReportStoreResource):
    """The rows of the partition's backend family on its op and stratum (its shard directory). The
    reference partition's rows are folded in first: reused on an exact device, torch version,
    fingerprint, case and gradient-mode match, measured again otherwise."""
    keys = context.partition_key.keys_by_dimension
    op, stratum = split_case(keys["case"])
    yield from fill_partition(context, sweep=sweep, executor=executor, store=store, op=op, stratum=stratum,
                              backend=keys["backend"], seed_dirs=(Path(reference),),
                              out_dir=measurement_dir(sweep.root(context), keys["backend"], keys["case"]))
