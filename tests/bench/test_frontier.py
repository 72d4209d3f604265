"""The budget frontier of a fill (bench/frontier.py): OOM/timeout points block the cases dominating them."""

from popcorn.bench.frontier import Frontier
from popcorn.core import Case


def _rms(n, batch=(8,), dtype="float32", eps=1e-6):
    return Case({"normalized_shape": n}, batch, dtype, {"eps": eps})


def test_frontier_blocks_dominated():
    f = Frontier()
    s = "coverage-float32-grad"
    f.add(_rms(4096, (16,)), True, s)
    assert f.blocks(_rms(4096, (16,)), True, s)
    assert f.blocks(_rms(8192, (32,)), True, s)
    assert not f.blocks(_rms(2048, (16,)), True, s)
    assert not f.blocks(_rms(8192, (8,)), True, s)  # mixed trade-off: smaller batch, larger dim
    assert not f.blocks(_rms(8192, (32,)), False, s)  # other gradient mode
    assert not f.blocks(_rms(8192, (32,)), True, "production-float32-grad")  # other stratum
    assert not f.blocks(_rms(8192, (32,), eps=1e-5), True, s)  # other args
    assert not f.blocks(_rms(8192, (32,), dtype="bfloat16"), True, s)  # other dtype
    assert not f.blocks(_rms(8192, ()), True, s)  # other batch rank
    ln = Case({"normalized_shape": 8192}, (32,), "float32", {"eps": 1e-6}, ("bias",))
    assert not f.blocks(ln, True, s)  # other present set


def test_frontier_keeps_minimal_points():
    f = Frontier()
    s = "production-bfloat16-grad"
    f.add(_rms(8192, (32,)), True, s)
    f.add(_rms(16384, (64,)), True, s)  # dominated by the first: not kept
    assert len(f) == 1
    f.add(_rms(4096, (64,)), True, s)  # a trade-off: kept beside the first
    assert len(f) == 2
    f.add(_rms(4096, (16,)), True, s)  # dominates both: replaces them
    assert len(f) == 1
    assert f.blocks(_rms(4096, (64,)), True, s) and not f.blocks(_rms(2048, (64,)), True, s)
