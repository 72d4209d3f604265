"""liger adapters on the CPU: what they admit (gates, predicates), and that without liger-kernel every
op still dispatches, never importing it. Their values are checked by the conformance test on a GPU."""

import subprocess
import sys

import pytest
import torch

from popcorn.core import BackendUnavailable
from popcorn.kernels import OPS, geglu, rms_norm

LIGER = sorted(name for name, op in OPS.items() if "liger" in op.implementations)


def test_liger_covers_the_row_wise_ops_and_the_llama_block():
    assert LIGER == ["add_rms_norm", "cross_entropy", "geglu", "layer_norm", "rms_norm", "rope", "softmax", "swiglu"]


@pytest.mark.parametrize("name", LIGER)
def test_every_liger_adapter_declines_cpu_tensors_and_imports_lazily(name):
    impl = OPS[name]["liger"]
    assert impl.source and impl.source.startswith(f"popcorn.kernels.{name}.liger:")
    assert impl.predicate(x=torch.zeros(2), w=torch.zeros(2)) is False
    assert impl.predicate(n=3) is False  # no tensor: nothing to run a kernel on


def test_geglu_takes_the_tanh_approximation_only():
    impl = geglu["liger"]
    assert impl.admits_static("bfloat16", {"approximate": "tanh"}, ()) is True
    assert impl.admits_static("bfloat16", {"approximate": "none"}, ()) is False


def test_cross_entropy_declares_its_loss_in_the_logits_dtype():
    impl = OPS["cross_entropy"]["liger"]
    logits = torch.zeros(2, 5, dtype=torch.bfloat16)
    assert impl.expected_dtypes({"logits": logits}) == {0: torch.bfloat16}


def test_forcing_liger_without_it_names_the_extra():
    if "liger" in rms_norm.available_backends():
        pytest.skip("liger-kernel is installed here")
    with pytest.raises(BackendUnavailable, match=r"pip install 'popcorn\[liger\]'"):
        rms_norm(torch.randn(2, 8), torch.ones(8), backend="liger")


def test_without_liger_every_op_dispatches_and_liger_is_never_imported():
    code = ("import sys, torch\n"
            "from popcorn.kernels import OPS, rms_norm, softmax, swiglu, cross_entropy\n"
            "x = torch.randn(4, 8, requires_grad=True)\n"
            "rms_norm(x, torch.ones(8)).sum().backward()\n"
            "softmax(x); swiglu(x, x)\n"
            "cross_entropy(torch.randn(4, 7), torch.tensor([0, 1, 2, 3]))\n"
            "assert 'liger_kernel' not in sys.modules, 'liger_kernel was imported'\n"
            "assert all('liger' not in op.available_backends() for op in OPS.values())\n")
    if "liger" in rms_norm.available_backends():
        pytest.skip("liger-kernel is installed here")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
