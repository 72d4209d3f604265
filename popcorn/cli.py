"""The ``popcorn`` command. Subcommands import what they need lazily, so ``--help`` stays fast."""

from __future__ import annotations

import argparse
import json
import sys


def _catalog(args) -> int:
    from popcorn.core.backends import BACKENDS
    from popcorn.kernels import OPS

    if _unknown_ops(args.ops, OPS):
        return 2
    ops = [OPS[n] for n in (args.ops or sorted(OPS))]
    if args.json:
        rows = [{
            "op": op.name, "summary": op.summary, "tags": list(op.tags),
            "backends": {n: {"installed": i.available, "problem": i.backend.problem(),
                             "forward_only": i.forward_only, "gates": sorted(i.gates)}
                         for n, i in op.implementations.items()},
        } for op in ops]
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(op.name) for op in ops)
    for op in ops:
        marks = "  ".join(f"{n}{'' if i.available else ' (missing)'}" for n, i in op.implementations.items())
        print(f"{op.name:<{width}}  {marks}")
        if args.ops:
            print(f"{'':<{width}}  {op.summary}")
            print(f"{'':<{width}}  $$ {op.math} $$")
            print(f"{'':<{width}}  args: {op.arg_pools}   tags: {', '.join(op.tags)}")
    print(f"\n{len(ops)} ops, {sum(len(op.implementations) for op in ops)} implementations")
    covers = {name: sorted({op.name for op in OPS.values() for i in op.implementations.values()
                            if i.backend.name == name}) for name in BACKENDS}
    for name, b in BACKENDS.items():
        if b.package is None or (args.ops and not set(covers[name]) & set(args.ops)):
            continue
        if not covers[name]:  # say so rather than suggest an install that changes nothing
            hint = f"; installing popcorn[{b.extra}] changes nothing" if b.extra else ""
            print(f"  {name}: no adapters yet (covers no op){hint}")
        elif b.problem():
            print(f"  {b.problem()} (covers {', '.join(covers[name])})")
    return 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return n


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535); name the ops before --live, "
                                         "or give it a port: --live 9000")
    return n


def _fill(args) -> int:
    from contextlib import nullcontext

    from popcorn.bench.fill import ShardSink, drain_on_sigterm, fill, write_summary
    from popcorn.kernels import OPS

    ops = _fill_ops(args.ops, OPS)
    if ops is None:
        return 2
    if args.slice and len(args.ops) != 1:
        print("--slice describes one op's context: name exactly one op", file=sys.stderr)
        return 2
    live = None
    if args.live is not None:  # listen before measuring anything: a taken port fails the command at once
        from popcorn.bench.live import LiveServer, LiveUnavailable

        try:
            live = LiveServer(args.live)
        except LiveUnavailable as e:
            print(f"popcorn bench fill: --live: {e}", file=sys.stderr)
            return 2
    with drain_on_sigterm() as terminated:  # a walltime or scancel drains the fill as Ctrl-C does
        try:
            with live or nullcontext():  # the server ends with the fill, however the fill ends
                summary = fill(ops, backends=args.backend, limit=args.limit, force=args.force,
                               timeout=args.timeout, slice_spec=args.slice, trials=args.trials, device=args.device,
                               curves=args.curves_only, strata=args.stratum, points=args.points,
                               sink=ShardSink(args.out) if args.out else None, workers=args.workers, observer=live)
        except ValueError as e:
            print(f"popcorn bench fill: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # after the rows were written, while the fill was closing
            print("popcorn bench fill: interrupted", file=sys.stderr)
            return 130
        print(summary.table())
        if args.out:
            write_summary(summary, args.out)
        if terminated:
            print("popcorn bench fill: stopped by SIGTERM; every finished row is written, and the same command "
                  "measures the rest", file=sys.stderr)
    return 130 if summary.interrupted else 0


def _merge(args) -> int:
    from popcorn.bench import store
    from popcorn.bench.delta import ReportStore

    shards = _read_shards("merge", args.files or [store.cache_dir()])
    if shards is None:
        return 2
    rows, files, bad = shards
    target = ReportStore()
    metrics = target.merge(rows)
    print(f"merged {len(rows)} rows from {len(files)} file(s) into {target.uri}: "
          f"{metrics.get('num_target_rows_inserted', 0)} inserted, {metrics.get('num_target_rows_updated', 0)} "
          f"updated; store version {metrics['version']}")
    if args.scrub_incomplete:
        print(f"scrubbed {target.scrub_incomplete()} incomplete rows; store version {target.version}")
    return 1 if bad else 0


def _check(args) -> int:
    from popcorn.bench import store
    from popcorn.bench.audit import run_check
    from popcorn.bench.delta import ReportStore
    from popcorn.kernels import OPS

    rows = ReportStore().read()
    if args.include:  # audit shards as if merged, before merging them
        shards = _read_shards("check", args.include)
        if shards is None:
            return 2
        rows = store.merge(rows, shards[0])
        print(f"auditing the store with {len(shards[1])} included file(s) folded in")
    return run_check(rows, OPS, release=args.release)


def _plan(args) -> int:
    from popcorn.bench.plan_view import run_plan
    from popcorn.kernels import OPS

    if _unknown_ops(args.ops, OPS):
        return 2
    return run_plan([OPS[n] for n in args.ops], memory_gib=args.device_memory, curves=args.curves_only,
                    strata=args.stratum, cases=not args.summary, points=args.points)


def _publish(args) -> int:
    from pathlib import Path

    from popcorn.bench.delta import ReportStore
    from popcorn.bench.publish import BUNDLED, PublishRefused, publish
    from popcorn.kernels import OPS

    try:
        publish(ReportStore(), OPS, Path(args.out) if args.out else BUNDLED, force=args.force,
                version=args.as_of, log=sys.stdout)
    except (PublishRefused, FileNotFoundError) as e:
        print(f"popcorn bench publish: {e}", file=sys.stderr)
        return 1
    return 0


def _view(args) -> int:
    from popcorn.bench import store
    from popcorn.bench.delta import ReportStore
    from popcorn.bench.view import published, run_view
    from popcorn.kernels import OPS

    rows = ReportStore().read(version=args.as_of) if args.as_of is not None else published()
    bad: list = []
    if args.user:
        rows = store.merge(rows, [r for op in OPS for r in store.read(op, bad=bad)])
    _report_skipped(bad)
    return run_view(rows, OPS) or (1 if bad else 0)


def _sweep(args) -> int:
    """``popcorn sweep ...`` is ``python -m orchestration.cli ...``: popcorn never imports the Dagster code
    location (the import contract), so the sweep's commands run in a process of their own."""
    return _source_checkout_module("orchestration.cli", "popcorn sweep", args.args or ["--help"])


def _up(args) -> int:
    """``popcorn up`` is ``python -m orchestration.up``: the Dagster UI and the explorer, side by side."""
    return _source_checkout_module("orchestration.up", "popcorn up", args.args)


def _source_checkout_module(module: str, command: str, argv: list[str]) -> int:
    """Run ``python -m module argv`` from the source checkout beside this package; Ctrl-C is the module's
    to handle (it hears it too and ends its own way)."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / "orchestration" / "cli.py").exists():
        print(f"{command} runs from a source checkout, where orchestration/ sits beside popcorn/: "
              "clone the repository and `pip install -e '.[orchestration]'` there", file=sys.stderr)
        return 2
    path = [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    proc = subprocess.Popen([sys.executable, "-m", module, *argv],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def _report_skipped(bad: list) -> None:
    for path, line, why in bad:
        print(f"skipped {path}:{line} ({why})", file=sys.stderr)


def _fill_ops(names, catalog) -> list | None:
    """The ops to fill: catalog names, or ``module:attribute`` for an op registered in a module of one's
    own (the fill's worker imports it by that module's name); None after naming the unknown ones."""
    import importlib

    from popcorn.core.registry import Op

    ops, unknown = [], []
    for name in names or sorted(catalog):
        module, _, attr = name.partition(":")
        try:
            op = catalog.get(name) or (getattr(importlib.import_module(module), attr, None) if attr else None)
        except ImportError:
            op = None
        (ops if isinstance(op, Op) else unknown).append(op if isinstance(op, Op) else name)
    if unknown:
        print(f"unknown op(s): {', '.join(unknown)}; known: {', '.join(sorted(catalog))}, or module:attribute "
              "for an op registered in your own module", file=sys.stderr)
        return None
    return ops


def _unknown_ops(names, ops) -> bool:
    """Say which names are no op (True), or nothing (False)."""
    unknown = [n for n in names if n not in ops]
    if unknown:
        print(f"unknown op(s): {', '.join(unknown)}; known: {', '.join(sorted(ops))}", file=sys.stderr)
    return bool(unknown)


def _read_shards(command: str, paths) -> tuple | None:
    """(records, files, skipped lines) of the record files under ``paths``, every skipped line reported;
    None (after saying why) when a path does not exist."""
    from popcorn.bench import store

    try:
        files = store.jsonl_files(paths)
    except FileNotFoundError as e:
        print(f"popcorn bench {command}: {e}", file=sys.stderr)
        return None
    bad: list = []
    rows = [r for f in files for r in store.read_file(f, bad)]
    _report_skipped(bad)
    return rows, files, bad


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="popcorn", description="Validate, benchmark and dispatch GPU kernels "
                                "against pure-PyTorch references.")
    groups = p.add_subparsers(dest="command", metavar="COMMAND")

    ops = groups.add_parser("ops", help="list the op catalog with each op's backends and their install state")
    ops.add_argument("ops", nargs="*", help="ops to describe in detail (default: all, one line each)")
    ops.add_argument("--json", action="store_true", help="print the catalog as JSON")
    ops.set_defaults(run=_catalog)

    bench = groups.add_parser("bench", help="measure backends, merge, check, publish and view the report")
    bench.set_defaults(run=lambda a: bench.print_help() or 0)
    bench_cmds = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND")
    f = bench_cmds.add_parser("fill", help="measure the shared case plan on this machine's device",
                              description="Run the case plan (pairwise coverage plus production and long-context "
                              "curves) for the reference and every installed backend; cached cases are skipped.")
    f.add_argument("ops", nargs="*", help="ops to fill (default: all); module:attribute names an op registered "
                   "in a module of your own")
    f.add_argument("--backend", action="append", help="only this backend (repeatable; 'fla' also takes 'fla:*')")
    f.add_argument("--limit", type=int, help="a deterministic random sample of N planned cases per op")
    f.add_argument("--force", action="store_true", help="measure cases the user cache (or --out DIR) already holds")
    f.add_argument("--timeout", type=float, default=300.0,
                   help="watchdog seconds per case and backend, room for a first compile (default 300; the "
                   "reference gets at most 60)")
    f.add_argument("--slice", nargs="+", metavar="TOKEN",
                   help="AXIS name=value ... dtype=... '...=[8]' +optional: vary one axis in a fixed context")
    f.add_argument("--trials", type=int, default=10, help="correctness trials per case (default 10)")
    f.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    f.add_argument("--curves-only", action="store_true",
                   help="the named production and long-context curves alone (release fills)")
    f.add_argument("--points", type=_positive, metavar="N",
                   help="each named curve's N smallest points alone (curves only; 2 is what `bench check "
                   "--release` needs, the cheapest release fill)")
    f.add_argument("--stratum", action="append", metavar="NAME",
                   help="only the plan's cases of this stratum (repeatable), e.g. production-bfloat16-grad; "
                   "--limit then samples among them (`bench plan OP --summary` lists the strata)")
    f.add_argument("--out", metavar="DIR", help="write JSONL shards (DIR/<op>.jsonl) instead of the user cache; "
                   "cases DIR already holds are skipped; `popcorn bench merge DIR` folds them into the store; "
                   "DIR/fill-summary.json says what the fill did")
    f.add_argument("--live", nargs="?", type=_port, const=8765, metavar="PORT",
                   help="stream the rows of this fill to the kernel explorer from http://127.0.0.1:PORT while it "
                   "runs (default port 8765); a --slice fill streams the slice's cached rows first")
    f.add_argument("--workers", type=_positive, metavar="N",
                   help="cases measured side by side: compiles and correctness runs overlap, timing keeps the "
                   "device alone (default: three per four host cores on a GPU, at most 12; 1 on CPU)")
    f.set_defaults(run=_fill)

    pl = bench_cmds.add_parser("plan", help="print an op's case plan by stratum, with the pairs gated at plan time",
                               description="The cases `bench fill` would run, grouped by stratum (smallest first), "
                               "the curves they form, and per backend how many pairs static gates exclude.")
    pl.add_argument("ops", nargs="+", help="ops to plan")
    pl.add_argument("--device-memory", type=float, metavar="GIB",
                    help="plan for a device of this many GiB (default: this machine's device; an H200 has 141)")
    pl.add_argument("--curves-only", action="store_true", help="the named curves alone, as a release fill")
    pl.add_argument("--points", type=_positive, metavar="N", help="each named curve's N smallest points alone, as "
                    "`bench fill --points N`")
    pl.add_argument("--stratum", action="append", help="only this stratum (repeatable), e.g. production-bfloat16-grad")
    pl.add_argument("--summary", action="store_true", help="counts per stratum and curve, no case lines")
    pl.set_defaults(run=_plan)

    m = bench_cmds.add_parser("merge", help="fold JSONL shards or a user cache into the report store ($POPCORN_STORE)")
    m.add_argument("files", nargs="*", help="JSONL files or directories (default: the user cache)")
    m.add_argument("--scrub-incomplete", action="store_true",
                   help="then delete rows that were scheduled but never measured")
    m.set_defaults(run=_merge)

    c = bench_cmds.add_parser("check", help="audit the report store: missing, stale, failing, untimed pairs")
    c.add_argument("--release", action="store_true", help="also require passes, timings, curve points, no bad rows")
    c.add_argument("--include", action="append", metavar="DIR|FILE",
                   help="fold these JSONL shards in (as a merge would) before auditing; the store is not written")
    c.set_defaults(run=_check)

    pub = bench_cmds.add_parser("publish", help="write an immutable published report and dispatch table")
    pub.add_argument("--out", help="directory (default: the bundled popcorn/reports)")
    pub.add_argument("--force", action="store_true", help="publish although `bench check --release` fails")
    pub.add_argument("--as-of", type=int, metavar="VERSION", help="publish this store version (default: latest)")
    pub.set_defaults(run=_publish)

    v = bench_cmds.add_parser("view", help="print the support matrix (op x backend) in the terminal")
    v.add_argument("--user", action="store_true", help="fold in this machine's user cache")
    v.add_argument("--as-of", type=int, metavar="VERSION", help="the report store at this Delta version")
    v.set_defaults(run=_view)
    sweep = groups.add_parser("sweep", add_help=False, prefix_chars="\0",  # every argument goes to the sweep's CLI
                              help="run the full measurement sweep through Dagster, locally or on Slurm "
                              "(submit, watch, resume, status)")
    sweep.add_argument("args", nargs=argparse.REMAINDER)
    sweep.set_defaults(run=_sweep)
    up = groups.add_parser("up", add_help=False, prefix_chars="\0",
                           help="start the Dagster UI and the kernel explorer on this machine's store (127.0.0.1; "
                           "Ctrl-C stops both)")
    up.add_argument("args", nargs=argparse.REMAINDER)
    up.set_defaults(run=_up)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    from popcorn.bench.damage import StoreDamaged  # stdlib only: cheap

    try:
        return args.run(args)
    except StoreDamaged as e:
        print(f"popcorn: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
