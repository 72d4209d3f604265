"""report(): the seed's text layout, line by line."""

import json
from pathlib import Path

from popcorn.bench import report
from popcorn.bench.compare import Gauge, Result

from .test_record import make

SEED = """\
fla      torch      0.1 ms -> fla    0.0 ms   (8.4x)
         peak         0.33 GB ->      0.27 GB
         bwd           0.4 ms ->    0.1 ms   (4.0x)
         err 1.56e-02 on scale 5.2
liger    torch      0.1 ms -> liger    0.0 ms   (8.2x)
         peak         0.33 GB ->      0.27 GB
         bwd           0.4 ms ->    0.1 ms   (4.7x)
         err 1.56e-02 on scale 5.2"""


def seed_record(impl, fwd_ms, bwd_ms):
    return make(impl=impl, fwd=json.dumps({"out0": {"err": 1.56e-2, "budget": 1e-2, "scale": 5.2}}),
                ref_fwd_ms=0.126, fwd_ms=fwd_ms, ref_bwd_ms=0.4, bwd_ms=bwd_ms,
                ref_step_mem_mb=0.33 * 1024, step_mem_mb=0.27 * 1024)


def test_matches_the_seed_layout_line_by_line(capsys):
    text = report(seed_record("fla", 0.015, 0.1)) + "\n" + report(seed_record("liger", 0.126 / 8.2, 0.4 / 4.7))
    assert text.splitlines() == SEED.splitlines()
    assert capsys.readouterr().out.splitlines() == SEED.splitlines()  # printed as well as returned


def test_the_seed_document_shows_this_layout():
    seed = Path(__file__).parents[2].parent / "shared" / "seed" / "benchmarking.md"
    if seed.exists():  # the shared docs sit beside the checkout; CI lays them out the same way
        assert SEED in seed.read_text()


def test_non_pass_prints_status_and_reason():
    text = report(make(impl="liger", status="crash", reason="RuntimeError: misaligned address"))
    assert text == "liger    crash: RuntimeError: misaligned address"


def test_result_with_label_and_names():
    r = Result("pass", fwd={"out0": Gauge(1e-3, 1e-3, 2.0)},
               timing={"fwd_ms": 0.5, "ref_fwd_ms": 1.0})
    text = report(r, "rms_norm", mine="popcorn", reference="torch")
    assert text.splitlines() == ["rms_norm torch      1.0 ms -> popcorn    0.5 ms   (2.0x)",
                                 "         err 1.00e-03 on scale 2.0"]
