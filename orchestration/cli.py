"""``popcorn sweep`` (``python -m orchestration.cli``): submit, watch, resume and status of the sweep.

``popcorn`` itself never imports this package (the import contract); its ``sweep`` command runs this
module in a subprocess.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

SLURM_NOTE = "the Slurm executor (orchestration/slurm.py)"


def _nodes(text: str) -> int:
    from .sweep import MAX_NODES

    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"--nodes takes 1 to {MAX_NODES}, not {text!r}")
    return n


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _executor_env(tags: dict) -> dict:
    from .sweep import EXECUTOR, IMAGE, NODES

    env = {"POPCORN_SWEEP_EXECUTOR": tags.get(EXECUTOR, "local")}
    if NODES in tags:
        env["POPCORN_SWEEP_NODES"] = tags[NODES]
    if IMAGE in tags:
        env["POPCORN_SWEEP_CONTAINER_IMAGE"] = tags[IMAGE]
    return env


def _gpus(tags: dict) -> int:
    from .execution import fills_per_gpu, visible_gpus
    from .sweep import EXECUTOR, GPUS_PER_NODE, NODES

    if tags.get(EXECUTOR) == "local":
        gpus = visible_gpus()
        return len(gpus) * fills_per_gpu() if gpus else 1
    return int(tags.get(NODES, 1)) * GPUS_PER_NODE


def _check_executor(tags: dict) -> str | None:
    """Why the sweep's executor cannot run from here, or None."""
    from .sweep import EXECUTOR

    if tags.get(EXECUTOR) == "local":
        return None
    from .execution import slurm_executor

    try:
        slurm_executor()
    except RuntimeError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - its configuration (the environment) is the Slurm executor's own
        return f"the Slurm executor cannot be set up here: {type(e).__name__}: {e}"
    return None


def _launch(inst, parts, tags: dict, title: str):
    """Launch a backfill of ``parts`` and see that a daemon works it (call under ``submitting``)."""
    from . import supervisor, sweep

    home = sweep.home()
    sweep.set_pools(inst, _gpus(tags))
    backfill = sweep.launch(inst, parts, tags, title)
    phases = Counter("reference" if p.asset_key.path[-1] == "reference" else
                     "merge" if p.asset_key.path[-1] == "report_store" else str(p.partition_key).split("|")[0]
                     for p in parts)
    print(f"launched sweep {backfill.tags[sweep.SWEEP]} (backfill {backfill.backfill_id}): {len(parts)} partitions, "
          + ", ".join(f"{k} {v}" for k, v in phases.items()))
    if supervisor.supervisor_alive(home):
        print("the sweep's supervisor picks it up")
    elif supervisor.other_daemon(inst, home):
        print(f"a Dagster daemon already serves {home} (dagster dev?): it runs the sweep with the executor it was "
              "started with (POPCORN_SWEEP_EXECUTOR, default local)")
    else:
        supervisor.start(home, {**os.environ, **_executor_env(tags)})
        print(f"started the sweep's supervisor and Dagster daemon (logs: {supervisor.state_dir(home)})")
    return backfill


def _plan(inst, tags: dict) -> None:
    """Materialize case_plan: the plan this sweep's partitions come from, recorded with its options."""
    import warnings

    import dagster as dg

    from .assets.case_plan import case_plan
    from .resources import SweepSettings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dg.materialize([case_plan], instance=inst, resources={"sweep": SweepSettings()}, tags=tags,
                       run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})


def submit(args) -> int:
    from . import supervisor, sweep
    from .watch import watch

    if args.local and args.container_image:
        print("popcorn sweep: container execution is not supported with --local", file=sys.stderr)
        return 2
    if args.local and args.nodes is not None:
        print("popcorn sweep: --nodes sizes a Slurm sweep; --local runs on this machine's GPUs", file=sys.stderr)
        return 2
    options = sweep.Options(local=args.local, nodes=args.nodes or sweep.DEFAULT_NODES, phases=args.phases,
                            ops=args.ops, strata=args.strata, curves_only=args.curves_only, reps=args.reps,
                            limit=args.limit, timeout=args.timeout, container_image=args.container_image,
                            everything=args.all, device=sweep.local_device() if args.local else None)
    tags = options.tags()
    problem = _check_executor(tags)
    if problem:
        print(f"popcorn sweep: {problem}", file=sys.stderr)
        return 2
    inst = sweep.instance()
    with supervisor.submitting(sweep.home()):
        if _running(inst, "is running (one at a time): `popcorn sweep watch` follows it; `popcorn sweep resume` "
                    "launches what it leaves unfinished"):
            return 1
        try:
            parts, skipped = sweep.targets(inst, options)
        except ValueError as e:
            print(f"popcorn sweep: {e}", file=sys.stderr)
            return 2
        for phase, why in skipped.items():
            print(f"skipping {phase}: {why}")
        if not parts:
            print("nothing to do: every selected partition is materialized (--all launches them anyway; each then "
                  "measures only what its shards and the store lack)")
            return 0
        _plan(inst, tags)
        backfill = _launch(inst, parts, tags, "popcorn sweep")
    if args.watch:
        return watch(inst, backfill.backfill_id)
    print("follow it with `popcorn sweep watch`; the Dagster UI (`dagster dev -w workspace.yaml`) shows it too")
    return 0


def _running(inst, says: str) -> bool:
    """Whether a sweep is active on ``inst``; if so, names it on stderr followed by ``says``."""
    from . import sweep

    running = sweep.active(inst)
    if running is not None:
        print(f"popcorn sweep: sweep {running.tags[sweep.SWEEP]} {says}", file=sys.stderr)
    return running is not None


def resume(args) -> int:
    from . import supervisor, sweep
    from .watch import watch

    inst = sweep.instance()
    home = sweep.home()
    with supervisor.submitting(home):
        stale = sweep.active(inst)
        if stale is not None and not supervisor.supervisor_alive(home) and not supervisor.other_daemon(inst, home):
            why = "the sweep's supervisor and Dagster daemon were gone (killed, or the machine restarted)"
            ended = sweep.abandon(inst, stale, why)
            print(f"sweep {stale.tags[sweep.SWEEP]}: {why}; canceled backfill {stale.backfill_id} and ended the "
                  f"{ended} run(s) it left unfinished; relaunching what is not materialized")
        elif _running(inst, "is still running: `popcorn sweep watch` follows it"):
            return 1
        last = sweep.find(inst, args.run)
        if last is None:
            print(f"popcorn sweep: no sweep {args.run or ''} to resume".replace("  ", " "), file=sys.stderr)
            return 2
        first = inst.get_backfill(last.tags[sweep.SWEEP]) or last
        tags = {k: v for k, v in first.tags.items() if k.startswith("popcorn/")}
        if args.container_image:
            if tags.get(sweep.EXECUTOR) == "local":
                print("popcorn sweep: container execution is not supported with --local", file=sys.stderr)
                return 2
            tags[sweep.IMAGE] = args.container_image
        problem = _check_executor(tags)
        if problem:
            print(f"popcorn sweep: {problem}", file=sys.stderr)
            return 2
        parts = sweep.unfinished(inst, first)
        if not parts:
            print(f"nothing to resume: every partition of sweep {tags[sweep.SWEEP]} is materialized")
            return 0
        backfill = _launch(inst, parts, {**tags, sweep.RESUMES: last.backfill_id}, "popcorn sweep (resumed)")
    return watch(inst, backfill.backfill_id) if args.watch else 0


def watch_cmd(args) -> int:
    from . import sweep
    from .watch import watch

    return watch(sweep.instance(), args.run)


def status(args) -> int:
    from popcorn.bench.delta import ReportStore

    from . import supervisor, sweep
    from .assets.reference import GPU_POOL
    from .watch import render

    inst = sweep.instance()
    home = sweep.home()
    if supervisor.supervisor_alive(home):
        daemon = "the sweep's supervisor runs a Dagster daemon"
    elif supervisor.other_daemon(inst, home):
        daemon = "a Dagster daemon serves it (dagster dev?)"
    else:
        daemon = "no Dagster daemon (a submit or resume starts one)"
    store = ReportStore()
    print(f"instance: {home}; {daemon}")
    pool = (f"{inst.event_log_storage.get_concurrency_info(GPU_POOL).slot_count} slot(s)"
            if GPU_POOL in inst.event_log_storage.get_concurrency_keys() else "no limit set")
    print(f"store: {store.uri} (version {store.version if store.exists() else 'none yet'}); gpu pool: {pool}")
    check = _release_verdict(inst)
    if check:
        print(f"release check at the last merge: {check}")
    last = sweep.find(inst, None)
    if last is None:
        print("no sweep yet: `popcorn sweep submit` starts one")
        return 0
    print(render(inst, last))
    return 0


def _release_verdict(inst) -> str | None:
    import dagster as dg

    key = dg.AssetCheckKey(dg.AssetKey("report_store"), "release_check")
    record = inst.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key)
    evaluation = record.event.asset_check_evaluation if record is not None and record.event is not None else None
    if evaluation is None:
        return None
    verdict = evaluation.metadata.get("verdict")
    return verdict.value if verdict is not None else ("passed" if evaluation.passed else "FAILED")


def parser() -> argparse.ArgumentParser:
    from .sweep import DEFAULT_NODES, MAX_NODES

    p = argparse.ArgumentParser(prog="popcorn sweep", description="The measurement sweep as Dagster backfills of the "
                                "sweep's partitions (reference and backend x op.stratum), on this machine's GPUs "
                                "(--local) or on Slurm; one sweep at a time; it never publishes.")
    cmds = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    s = cmds.add_parser("submit", help="launch the partitions not yet materialized, then the merge into the store")
    s.add_argument("--nodes", type=_nodes, help=f"Slurm nodes (default {DEFAULT_NODES}, at most {MAX_NODES}); "
                   "8 GPUs each")
    s.add_argument("--local", action="store_true", help="run on this machine's GPUs (CPU without one)")
    s.add_argument("--phases", nargs="+", metavar="PHASE", help="reference and/or backend families (default: all; "
                   "with --local, those installed here)")
    s.add_argument("--ops", nargs="+", metavar="OP", help="only these ops (default: all)")
    s.add_argument("--strata", nargs="+", metavar="STRATUM", help="only these strata, e.g. production-bfloat16-grad")
    s.add_argument("--curves-only", action="store_true", help="the named curves alone (a release fill)")
    s.add_argument("--reps", type=_positive, default=10, help="correctness trials per case (default 10)")
    s.add_argument("--limit", type=_positive, help="a deterministic sample of N planned cases per partition")
    s.add_argument("--timeout", type=float, default=300.0, help="watchdog floor per case in seconds (default 300)")
    s.add_argument("--container-image", metavar="IMAGE", help="run every Slurm task in this image (Pyxis)")
    s.add_argument("--all", action="store_true", help="also partitions already materialized (each measures only "
                   "what its shards and the store lack)")
    s.add_argument("--watch", action="store_true", help="then follow it (Ctrl-C stops watching, not the sweep)")
    s.set_defaults(func=submit)
    w = cmds.add_parser("watch", help="per-phase progress of a sweep until it ends (Ctrl-C stops watching only)")
    w.add_argument("run", nargs="?", metavar="RUN", help="a sweep or backfill id (default: the latest sweep)")
    w.set_defaults(func=watch_cmd)
    r = cmds.add_parser("resume", help="launch the partitions a sweep left unfinished")
    r.add_argument("run", nargs="?", metavar="RUN", help="a sweep or backfill id (default: the latest sweep)")
    r.add_argument("--container-image", metavar="IMAGE", help="run its Slurm tasks in this image from now on")
    r.add_argument("--watch", action="store_true", help="then follow it")
    r.set_defaults(func=resume)
    st = cmds.add_parser("status", help="the instance, its daemon, the store and the latest sweep's progress")
    st.set_defaults(func=status)
    return p


def main(argv: list[str] | None = None) -> int:
    import importlib.util

    if importlib.util.find_spec("dagster") is None:
        print("popcorn sweep needs Dagster: pip install -e '.[orchestration]'", file=sys.stderr)
        return 2
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
