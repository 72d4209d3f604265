"""benchmarks/dispatch_live.py: shapes from the plan's production curves, scaled for the CPU; the report's
failures kept from the fastest; a CPU smoke run of the reference (the full smoke run, compile included, is
`python benchmarks/dispatch_live.py --device cpu --quick --ops rms_norm softmax`, about a minute)."""

import importlib.util
from pathlib import Path

from popcorn.core import Case
from popcorn.kernels import OPS

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dispatch_live", ROOT / "benchmarks" / "dispatch_live.py")
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)

H200 = 141 * 2**30


def test_picks_spread_over_a_curve():
    assert live.picks(tuple("abcdefg"), 3) == ["a", "d", "g"]
    assert live.picks(tuple("ab"), 3) == ["a", "b"]
    assert live.picks(tuple("abcde"), 1) == ["c"]


def test_shapes_follow_the_production_curves():
    op = OPS["rms_norm"]
    got = live.shapes(op, ["bfloat16", "float32"], H200, 3)
    cases = [c for c, _ in got]
    assert {c.dtype for c in cases} == {"bfloat16", "float32"}
    assert all(modes == (False, True) for _, modes in got)
    widths = sorted(c.dims["normalized_shape"] for c in cases if c.batch == (4096,) and c.dtype == "bfloat16")
    assert widths[0] == 8 and widths[-1] == 53248  # the width curve's ends
    assert max(c.batch[0] for c in cases if c.batch) == 65536  # the token rows curve's largest
    assert len({c.case_id for c in cases}) == len(cases)
    quick = live.shapes(op, ["bfloat16"], H200, 3, quick=True)
    assert len(quick) == 1 and quick[0][0].batch == (4096,)  # the middle of the width curve
    assert len(live.shapes(op, ["bfloat16"], H200, 3, per_dtype=1)) == 3


def test_scaled_shrinks_rows_first_and_keeps_constraints():
    op = OPS["rms_norm"]
    case = Case({"normalized_shape": 4096}, (65536,), "bfloat16", {"eps": 1e-6})
    small = live.scaled(op, case, 2**20)
    assert small.dims == {"normalized_shape": 4096} and small.batch == (128,)
    assert live.scaled(op, small, None) is small and live.scaled(op, small, 2**30) is small
    attn = OPS["attn"]
    for case, _ in live.shapes(attn, ["bfloat16"], H200, 3):
        s = live.scaled(attn, case, 2**16)
        assert s.dims["q_heads"] % s.dims["kv_heads"] == 0 and live.elements(attn, s) <= 2**17


def test_failing_reads_the_call_mode_on_this_device():
    rows = [dict(impl="liger", case_id="c", grad=True, device="NVIDIA H200", status="fail"),
            dict(impl="liger", case_id="c", grad=False, device="NVIDIA H200", status="pass"),
            dict(impl="fla", case_id="c", grad=True, device="NVIDIA H100", status="crash"),
            dict(impl="compile", case_id="d", grad=True, device="NVIDIA H200", status="fail")]
    # fla has no H200 row: its sibling H100's crash speaks for it
    assert live.failing(rows, "c", True, "NVIDIA H200") == {"liger", "fla"}
    assert live.failing(rows, "c", False, "NVIDIA H200") == {"fla"}  # liger's forward row passes
    assert live.failing(rows[1:], "c", True, "NVIDIA H100") == {"fla"}  # liger's own mode has no row: its forward
    assert live.failing(rows, "c", True, "NVIDIA B200") == {"liger", "fla"}
    assert live.failing(rows, "d", False, "NVIDIA H200") == {"compile"}  # a gradient row speaks for forward
    assert live.failing(rows, "c", True, "cpu:x86_64") == set()  # GPU rows say nothing of the CPU


def test_cpu_smoke_of_the_reference(capsys):
    assert live.main(["--device", "cpu", "--quick", "--ops", "rms_norm", "softmax", "--backends", "torch",
                      "--max-elements", "4096"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("device: cpu") and "scaled to <= 4096 input elements" in lines[0]
    assert "| op | shape | dtype | mode | chosen | chosen ms | torch ms | fastest | chosen / fastest |" in out
    rows = [line for line in lines if line.startswith(("| rms_norm |", "| softmax |"))]
    assert len(rows) == 4 and all("| torch |" in line for line in rows)
    assert lines[-1].startswith("chosen within 5% of the fastest: ") and "/4 rows" in lines[-1]
