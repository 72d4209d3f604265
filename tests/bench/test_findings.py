"""benchmarks/findings.py: the per-backend summary, the failure table and the ops no library covers."""

import importlib.util
import json
from pathlib import Path

from popcorn.bench import store
from popcorn.core import Case
from popcorn.kernels import OPS

from .test_audit import WithOnly
from .test_record import make

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("findings", ROOT / "benchmarks" / "findings.py")
findings = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(findings)

OP = OPS["rms_norm"]


def row(impl, rows, fwd_ms=None, step_ms=None, status="pass", grad=True, dtype="bfloat16", **kw):
    """A current rms_norm row of a case with ``rows`` token rows at width 4096."""
    case = Case({"normalized_shape": 4096}, (rows,), dtype, {"eps": 1e-6})
    return make(op="rms_norm", impl=impl, case_id=case.case_id, case=case.label, config=json.dumps(case.config()),
                ref_hash=OP.ref_hash, impl_hash=OP.implementations[impl].impl_hash, status=status, grad=grad,
                fwd_ms=fwd_ms, step_ms=step_ms, **kw)


def crafted():
    """compile wins the small shapes, liger the large ones; fla fails the largest."""
    out = []
    for n, (c, lg) in {16: (1.0, 2.0), 256: (1.0, 3.0), 4096: (5.0, 2.0), 65536: (9.0, 4.0)}.items():
        out += [row("torch", n, 10.0, 20.0), row("compile", n, c, 2 * c, ref_fwd_ms=10.0, ref_step_ms=20.0),
                row("liger", n, lg, 2 * lg, ref_fwd_ms=10.0, ref_step_ms=20.0)]
    out.append(row("fla", 65536, status="fail", reason="out0: err 0.5 > max(2*budget 0.01, floor*scale 0.02)"))
    return out


def libraries(op: str, **had: str) -> str:
    """What table c says of ``op``'s registered library adapters (read from the registry): ``had[name]``,
    else 'no rows'."""
    names = [n for n, i in OPS[op].implementations.items() if i.backend.package is not None]
    assert names
    return "; ".join(f"{n} ({had.get(n, 'no rows')})" for n in names)


def by_backend(table):
    return {line[1]: line for line in table}


def test_wins_split_by_shape():
    t = by_backend(findings.summary(crafted(), OPS, "bfloat16"))
    assert t["compile"][5] == "2/4" and t["liger"][5] == "2/4" and t["torch"][5] == "0/4"
    assert t["compile"][6] == "normalized_shape=4096,batch=16 .. normalized_shape=4096,batch=256"
    assert t["liger"][6] == "normalized_shape=4096,batch=4096 .. normalized_shape=4096,batch=65536"
    assert t["fla"][2] == "0/1" and t["fla"][5] == "0/4"
    # compile's forward speedups over the four cases: 10, 10, 2, 1.1 -> median 6
    assert t["compile"][3].startswith("6.00x [")
    assert t["torch"][3] == "-"  # the reference has no speedup over itself


def test_other_dtypes_stay_out():
    rows = crafted() + [row("liger", 16, 0.1, 0.2, dtype="float32", ref_fwd_ms=10.0)]
    assert by_backend(findings.summary(rows, OPS, "bfloat16"))["liger"][2] == "4/4"
    assert by_backend(findings.summary(rows, OPS, "float32"))["liger"][2] == "1/1"


def test_failures_keep_the_reason():
    rows = crafted() + [row("liger", 16, status="oom", reason="worker: OutOfMemoryError: 15.66 GiB"),
                        row("liger", 256, status="oom", reason="worker: OutOfMemoryError: 16.00 GiB")]
    bad = findings.failures(rows)
    assert ["rms_norm", "fla", "fail", "1", "normalized_shape=4096,batch=(65536,),bfloat16,eps=1e-06",
            "out0: err 0.5 > max(2*budget 0.01, floor*scale 0.02)"] in bad
    oom = [b for b in bad if b[2] == "oom"]
    assert len(oom) == 1 and oom[0][3] == "2"  # one group: the reasons differ in numbers only


def test_uncovered_names_ops_without_a_passing_library():
    rows = crafted()
    names = {line[0]: line[1] for line in findings.uncovered(rows, OPS)}
    assert "rms_norm" not in names  # liger passes
    assert names["softmax"] == libraries("softmax") and names["matmul"] == libraries("matmul")
    # an op no library covers says so
    bare = WithOnly(OPS["matmul"], ["torch", "compile"])
    assert findings.uncovered(rows, {"matmul": bare}) == [["matmul", "no library adapter"]]
    only_fla = [r for r in rows if r.impl != "liger"]
    assert findings.uncovered(only_fla, {"rms_norm": OP}) == [["rms_norm", libraries("rms_norm", fla="1 fail")]]


def test_report_over_the_h200_rows():
    results = ROOT / "benchmarks" / "results"
    records = [r for f in store.jsonl_files([results / "h200_curves", results / "h200_train_bench"])
               for r in store.read_file(f)]
    text = findings.report(records, OPS)
    assert text.startswith("device: NVIDIA H200")
    lines = text.splitlines()
    assert "| rms_norm | compile | 98/98 |" in "\n".join(lines)
    softmax = next(line for line in lines if line.startswith("| softmax | compile |"))
    assert "| 52/52 |" in softmax  # every contested bf16 softmax case is compile's
    assert any(line.startswith("| softmax | torch | oom | 6 |") for line in lines)
    assert any(line.startswith("| softmax | compile | error | 1 |") for line in lines)
    assert "| attn |" not in text.split("## b.")[0]  # its rows are stale: measured against older code
    assert f"| rms_norm | {libraries('rms_norm')} |" in text


def test_main_reads_shards(capsys):
    shards = ROOT / "benchmarks" / "results" / "h200_curves"
    assert findings.main(["--shards", str(shards), "--ops", "softmax", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "## a. Backends per op, float32" in out and "| softmax | compile |" in out
