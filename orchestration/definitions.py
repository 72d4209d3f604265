"""The code location: the sweep's assets, their checks and resources (``dagster dev -w workspace.yaml``).

The executor resource comes from ``POPCORN_SWEEP_EXECUTOR`` (``local``, the default, or ``slurm``): the
environment decides where partitions run, the assets stay the same. Runs execute in process (one
partition per run, its fill a subprocess), so a run costs no extra Python start per step.
"""

import dagster as dg

from .assets.case_plan import case_plan
from .assets.measurements import measurements
from .assets.published_report import published_report
from .assets.reference import reference
from .assets.report_store import release_check, report_store
from .execution import executor_from_env
from .resources import ReportStoreResource, SweepSettings

defs = dg.Definitions(
    assets=[case_plan, reference, measurements, report_store, published_report],
    asset_checks=[release_check],
    resources={"sweep": SweepSettings(), "executor": executor_from_env(), "store": ReportStoreResource()},
    executor=dg.in_process_executor,
)
