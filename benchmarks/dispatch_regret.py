"""Dispatch quality: how close each decision comes to the fastest backend measured correct.

Every recorded case (op, device, dtype, gradient mode) where the reference and at least one other
backend passed and were timed is replayed through ``decide`` with that case's own rows held out
(leave one case out: the call is predicted from its neighbours, as a new shape in training code
would be), and charged the measured time of the backend it picks. Regret = that time / the
fastest measured time of the case (1.00 is perfect). Forward-only calls are replayed from the
same rows' forward times. A held-out case at the edge of what was measured lies outside the
backends' validity regions, so it falls back to the reference: the last column counts those.
Baselines: always the reference; always the backend that wins most cases of the group. Runs on
the CPU: cases are rebuilt as meta tensors and decided for the device that measured them.

    python benchmarks/dispatch_regret.py [RECORDS.jsonl ...]   # default: benchmarks/results/fill_*.jsonl
"""

from __future__ import annotations

import statistics
import sys
import warnings
from collections import defaultdict
from pathlib import Path

from popcorn.core import Case
from popcorn.core.inputs import make_inputs
from popcorn.core.registry import REFERENCE
from popcorn.dispatch import evidence
from popcorn.dispatch.decide import decide, row_ms
from popcorn.kernels import OPS

RESULTS = Path(__file__).parent / "results"


def replay(op, rows: list[dict]) -> list[dict]:
    """One entry per (device, case, mode) with a reference time and another backend's time."""
    by_case = defaultdict(dict)
    for r in rows:
        if r["grad"]:  # a gradient row times both modes: the step, and the forward it checked
            by_case[(r["device"], r["case_id"], True)][r["impl"]] = r
        by_case[(r["device"], r["case_id"], False)].setdefault(r["impl"], r)
    out = []
    for (device, case_id, grad), impls in sorted(by_case.items()):
        times = {name: t for name, r in impls.items() if r["status"] == "pass" and (t := row_ms(r, grad))}
        if REFERENCE not in times or len(times) < 2:
            continue
        held_out = [r for r in rows if not (r["case_id"] == case_id and r["device"] == device)]
        case = Case.from_config(next(iter(impls.values()))["config"])
        arguments = make_inputs(op, case, device="meta")
        decision = decide(op, arguments, grad, rows=held_out, here=device, graph=True)
        chosen = decision.impl
        in_sample = decide(op, arguments, grad, rows=rows, here=device, graph=True).impl
        best = min(times.values())
        out.append({"group": (op.name, device, case.dtype, grad), "times": times, "best": best,
                    "chosen": chosen, "regret": times.get(chosen, float("nan")) / best,
                    "edge": any(v.why.startswith("outside its validity region") for v in decision.verdicts),
                    "in_sample": times.get(in_sample, float("nan")) / best})
    return out


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(paths: list[str]) -> None:
    paths = paths or sorted(str(p) for p in RESULTS.glob("fill_*.jsonl"))
    warnings.simplefilter("ignore")  # foreign-evidence warnings: every row here is foreign to this CPU
    entries = []
    for name, op in OPS.items():
        rows = [r for p in paths for r in evidence.read_rows(op, p) if r["op"] == name]
        if rows:
            entries += replay(op, rows)
    groups = defaultdict(list)
    for e in entries:
        groups[e["group"]].append(e)
    print(f"records: {', '.join(paths)}")
    print("op | device | dtype | mode | cases | picks fastest | regret median | p90 | max | geomean | in-sample median "
          "| reference-only median | one-backend median, geomean | outside a region when held out")
    for (op, device, dtype, grad), es in sorted(groups.items()):
        wins = defaultdict(int)
        for e in es:
            wins[min(e["times"], key=e["times"].get)] += 1
        one = max(wins, key=wins.get)
        regret = [e["regret"] for e in es]
        fixed = [e["times"].get(one, float("nan")) / e["best"] for e in es]
        hits = sum(e["times"].get(e["chosen"]) == e["best"] for e in es)
        print(f"{op} | {device} | {dtype} | {'step' if grad else 'forward'} | {len(es)} | {hits / len(es):.0%} "
              f"| {statistics.median(regret):.3f} | {_q(regret, 0.9):.3f} | {max(regret):.3f} "
              f"| {statistics.geometric_mean(regret):.3f} "
              f"| {statistics.median(e['in_sample'] for e in es):.3f} "
              f"| {statistics.median(e['times'][REFERENCE] / e['best'] for e in es):.3f} "
              f"| {statistics.median(fixed):.3f}, {statistics.geometric_mean(fixed):.3f} ({one}) "
              f"| {sum(e['edge'] for e in es)}")


if __name__ == "__main__":
    main(sys.argv[1:])
