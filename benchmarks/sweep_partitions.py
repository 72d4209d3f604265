"""Sweep partitions materialized in process on this machine's device, twice: the second round measures nothing.

    python benchmarks/sweep_partitions.py rms_norm.production-bfloat16-grad attn.production-bfloat16-grad \
        --backends compile sdpa --limit 3 --trials 3

Per case: its ``reference`` partition, then a ``measurements`` partition per backend family the op has
(of ``--backends``), through the code location's own assets and ``LocalExecutor`` (each fill a subprocess
on a leased GPU), then ``report_store`` when deltalake is installed. Prints, per partition and pass,
rows by status, pairs measured and cached, the median speedup, the device and the wall time; ``--json``
keeps them. Shards, store and Dagster storage go to a fresh temporary directory unless ``--work``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg  # noqa: E402

from orchestration.assets.measurements import measurements  # noqa: E402
from orchestration.assets.reference import reference  # noqa: E402
from orchestration.assets.report_store import release_check, report_store  # noqa: E402
from orchestration.execution import LocalExecutor  # noqa: E402
from orchestration.partitions import applies, measurement_key  # noqa: E402
from orchestration.resources import ReportStoreResource, SweepSettings  # noqa: E402

KEPT = ("rows", "pass", "fail", "crash", "oom", "timeout", "skip", "error", "measured", "cached", "gated", "pruned",
        "median_speedup", "device")


def materialize(instance, resources, asset, key=None) -> dict:
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dg.materialize([reference, measurements, report_store, release_check], instance=instance,
                                resources=resources, selection=[asset], partition_key=key, raise_on_error=False,
                                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    row = {"asset": asset.key.path[-1], "partition": str(key or "-"), "ok": result.success,
           "wall_s": round(time.monotonic() - t0, 1)}
    for event in result.get_asset_materialization_events():
        meta = {k: v.value for k, v in event.materialization.metadata.items()}
        row.update({k: meta[k] for k in KEPT if k in meta})
        row.update({k: meta[k] for k in ("rows_merged", "store_version") if k in meta})
    for check in result.get_asset_check_evaluations():
        row[check.check_name] = "passed" if check.passed else "FAILED"
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="+", help="case keys, op.stratum")
    p.add_argument("--backends", nargs="+", default=["compile"], help="backend families (default compile)")
    p.add_argument("--limit", type=int, default=3)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--work", help="directory for shards, store and Dagster storage (default: a fresh one)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="sweep-partitions-"))
    instance = dg.DagsterInstance.ephemeral(tempdir=str(work / "dagster"))
    resources = {"sweep": SweepSettings(work_dir=str(work / "shards"), limit=args.limit, trials=args.trials),
                 "executor": LocalExecutor(lease_dir=str(work / "leases")),
                 "store": ReportStoreResource(uri=str(work / "store"))}
    merges = importlib.util.find_spec("deltalake") is not None
    rows = []
    for n in (1, 2):
        for case in args.cases:
            rows.append({"round": n, **materialize(instance, resources, reference, case)})
            for backend in args.backends:
                if applies(backend, case):
                    rows.append({"round": n, **materialize(instance, resources, measurements,
                                                           measurement_key(backend, case))})
        if merges:
            rows.append({"round": n, **materialize(instance, resources, report_store)})
    cols = ["round", "asset", "partition", "ok", "rows", "pass", "fail", "crash", "skip", "measured", "cached",
            "gated", "median_speedup", "no_failed_rows", "release_check", "rows_merged", "wall_s", "device"]
    print("\t".join(cols))
    for r in rows:
        print("\t".join(str(r.get(c, "")) for c in cols))
    second = [r for r in rows if r["round"] == 2 and r["asset"] != "report_store"]
    print(f"second round: {sum(r.get('measured', 0) for r in second)} pairs measured in {len(second)} partitions "
          f"(expected 0); deltalake {'merged' if merges else 'absent: no merge'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) and not any(r.get("measured") for r in second) else 1


if __name__ == "__main__":
    sys.exit(main())
