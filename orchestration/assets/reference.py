"""``reference``: the reference's rows per case partition, which every measurement of the case reuses."""

import dagster as dg

from ..execution import Executor
from ..partition import check_spec, fill_partition
from ..partitions import CASES, split_case
from ..resources import ReportStoreResource, SweepSettings
from ..shards import reference_dir
from .case_plan import case_plan

GPU_POOL = "gpu"  # one fill per GPU: `popcorn sweep` sizes it to the visible GPUs (Slurm: the allocation's)


@dg.asset(partitions_def=CASES, pool=GPU_POOL, deps=[case_plan], check_specs=[check_spec("reference")],
          group_name="sweep")
def reference(context: dg.AssetExecutionContext, sweep: SweepSettings, executor: Executor,
              store: ReportStoreResource):
    """The reference's rows for the partition's op and stratum (its shard directory)."""
    op, stratum = split_case(context.partition_key)
    yield from fill_partition(context, sweep=sweep, executor=executor, store=store, op=op, stratum=stratum,
                              out_dir=reference_dir(sweep.root(context), context.partition_key))
