"""Library adapters (liger, fla) on the CPU: what they admit (gates, predicates), and that without the
libraries every op still dispatches, never importing them. Their values are checked by the
conformance test on a GPU."""

import subprocess
import sys

import pytest
import torch

from popcorn.core import BackendUnavailable
from popcorn.kernels import OPS, geglu, rms_norm

COVERS = {
    "liger": ["add_rms_norm", "cross_entropy", "geglu", "layer_norm", "rms_norm", "rope", "softmax", "swiglu"],
    "fla": ["add_rms_norm", "l2_norm", "layer_norm", "rms_norm", "swiglu", "swish"],
}
PAIRS = [(lib, name) for lib, names in COVERS.items() for name in names]


@pytest.mark.parametrize("lib", COVERS)
def test_what_each_library_covers(lib):
    assert sorted(name for name, op in OPS.items() if lib in op.implementations) == COVERS[lib]


@pytest.mark.parametrize("lib, name", PAIRS, ids=[f"{lib}-{name}" for lib, name in PAIRS])
def test_every_adapter_declines_cpu_tensors_and_imports_lazily(lib, name):
    impl = OPS[name][lib]
    assert impl.source and impl.source.startswith(f"popcorn.kernels.{name}.{lib}:")
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


def test_without_the_libraries_every_op_dispatches_and_none_is_imported():
    code = ("import sys, torch\n"
            "from popcorn.kernels import OPS, rms_norm, softmax, swiglu, cross_entropy\n"
            "x = torch.randn(4, 8, requires_grad=True)\n"
            "rms_norm(x, torch.ones(8)).sum().backward()\n"
            "softmax(x); swiglu(x, x)\n"
            "cross_entropy(torch.randn(4, 7), torch.tensor([0, 1, 2, 3]))\n"
            "assert 'liger_kernel' not in sys.modules and 'fla' not in sys.modules, 'a library was imported'\n"
            "assert all(not {'liger', 'fla'} & set(op.available_backends()) for op in OPS.values())\n")
    if "liger" in rms_norm.available_backends():
        pytest.skip("liger-kernel is installed here")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("lib, name", PAIRS, ids=[f"{lib}-{name}" for lib, name in PAIRS])
def test_every_adapter_is_fingerprinted_where_its_library_is_missing(lib, name):
    # publish and dispatch compare rows measured elsewhere by this hash: it must not need the library
    assert len(OPS[name][lib].impl_hash) == 12
