"""Library adapters (liger, fla, quack, cudnn, fa4) on the CPU: what they admit (gates, predicates), and that without
the libraries every op still dispatches, never importing them. Their values are checked by the
conformance test on a GPU, and liger's and fla's by test_library_interpreter in Triton's interpreter."""

import subprocess
import sys

import pytest
import torch

from popcorn.core import BackendUnavailable
from popcorn.core.backends import BACKENDS
from popcorn.core.devices import dense
from popcorn.kernels import OPS, rms_norm

COVERS = {
    "liger": ["add_rms_norm", "cross_entropy", "embedding", "geglu", "group_norm", "jsd", "kl_div", "layer_norm",
              "linear_cross_entropy", "rms_norm", "rope", "softmax", "swiglu"],
    "fla": ["add_rms_norm", "attn", "attn_varlen", "cross_entropy", "gelu", "group_norm", "l2_norm", "layer_norm",
            "linear_cross_entropy", "logsumexp", "rms_norm", "softmax", "swiglu", "swish"],
    "quack": ["add_rms_norm", "cross_entropy", "linear", "matmul", "rms_norm", "softmax"],
    "cudnn": ["layer_norm", "rms_norm"],
    "fa4": ["attn", "attn_varlen"],
}
PAIRS = [(lib, name) for lib, names in COVERS.items() for name in names]


@pytest.mark.parametrize("lib", COVERS)
def test_what_each_library_covers(lib):
    assert sorted(name for name, op in OPS.items() if lib in op.implementations) == COVERS[lib]
    assert {n for op in OPS.values() for n in op.implementations if n.split(":")[0] == lib} == {lib}  # no variants


@pytest.mark.parametrize("lib, name", PAIRS, ids=[f"{lib}-{name}" for lib, name in PAIRS])
def test_every_adapter_declines_cpu_tensors_and_imports_lazily(lib, name):
    impl = OPS[name][lib]
    assert impl.source and impl.source.startswith(f"popcorn.kernels.{name}.{lib}:")
    assert impl.predicate(x=torch.zeros(2), w=torch.zeros(2)) is False
    assert impl.predicate(n=3) is False  # no tensor: nothing to run a kernel on


@pytest.mark.parametrize("name, lib", [("geglu", "liger"), ("gelu", "fla")])
def test_tanh_gelus_take_the_tanh_approximation_only(name, lib):
    impl = OPS[name][lib]
    assert impl.admits_static("bfloat16", {"approximate": "tanh"}, ()) is True
    assert impl.admits_static("bfloat16", {"approximate": "none"}, ()) is False


def test_cross_entropy_declares_its_loss_in_the_logits_dtype():
    impl = OPS["cross_entropy"]["liger"]
    logits = torch.zeros(2, 5, dtype=torch.bfloat16)
    assert impl.expected_dtypes({"logits": logits}) == {0: torch.bfloat16}


def test_forcing_a_missing_library_names_the_extra():
    if "quack" in rms_norm.available_backends():  # quack needs nvidia-cutlass-dsl: never in the dev install
        pytest.skip("quack-kernels is installed here")
    with pytest.raises(BackendUnavailable, match=r"pip install 'popcorn\[quack\]'"):
        rms_norm(torch.randn(2, 8), torch.ones(8), backend="quack")


# A fresh install without the extras, as popcorn sees it: the libraries' distributions and modules are hidden
# (the dev install brings liger and fla for the interpreter tests); read from the families' declarations
MODULES = {BACKENDS[lib].module.split(".")[0] for lib in COVERS}
HIDDEN = MODULES | {BACKENDS[lib].package for lib in COVERS}
WITHOUT_LIBRARIES = f"""
import importlib.metadata, importlib.util, sys
HIDDEN = set({sorted(HIDDEN)!r})
_version, _find_spec = importlib.metadata.version, importlib.util.find_spec
def version(dist):
    if dist in HIDDEN:
        raise importlib.metadata.PackageNotFoundError(dist)
    return _version(dist)
def find_spec(name, package=None):
    return None if name.split(".")[0] in HIDDEN else _find_spec(name, package)
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden)")
importlib.metadata.version, importlib.util.find_spec = version, find_spec
sys.meta_path.insert(0, Hide())
"""


def test_without_the_libraries_every_op_dispatches_and_none_is_imported():
    code = (WITHOUT_LIBRARIES + "import sys, torch\n"
            "from popcorn.kernels import OPS, rms_norm, softmax, swiglu, cross_entropy\n"
            "x = torch.randn(4, 8, requires_grad=True)\n"
            "rms_norm(x, torch.ones(8)).sum().backward()\n"
            "softmax(x); swiglu(x, x)\n"
            "cross_entropy(torch.randn(4, 7), torch.tensor([0, 1, 2, 3]))\n"
            "q = torch.randn(1, 2, 8, 16, requires_grad=True)\n"
            "OPS['attn'](q, q, q, is_causal=True).sum().backward()\n"
            f"imported = set({sorted(MODULES)!r}) & set(sys.modules)\n"
            "assert not imported, f'{imported} imported'\n"
            f"assert all(not set({sorted(COVERS)!r}) & set(op.available_backends()) for op in OPS.values())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("lib, name", PAIRS, ids=[f"{lib}-{name}" for lib, name in PAIRS])
def test_every_adapter_is_fingerprinted_where_its_library_is_missing(lib, name):
    # publish and dispatch compare rows measured elsewhere by this hash: it must not need the library
    assert len(OPS[name][lib].impl_hash) == 12


def test_out_of_gate_dtypes_and_values_are_refused_at_plan_time():
    refused = [("jsd", "liger", "float64", {}), ("kl_div", "liger", "float64", {}),
               ("cross_entropy", "fla", "float64", {}), ("linear_cross_entropy", "liger", "float64", {}),
               ("linear_cross_entropy", "fla", "float32", {"reduction": "none"}),
               ("group_norm", "liger", "float16", {}), ("logsumexp", "fla", "float64", {}),
               ("softmax", "fla", "float64", {}), ("attn", "fla", "float32", {"is_causal": True}),
               ("attn", "fla", "bfloat16", {"is_causal": False}), ("attn_varlen", "fla", "bfloat16", {"causal": False}),
               ("cross_entropy", "quack", "bfloat16", {"label_smoothing": 0.1}), ("rms_norm", "quack", "float64", {}),
               ("rms_norm", "cudnn", "float64", {}), ("layer_norm", "cudnn", "float64", {}),
               ("linear", "quack", "float32", {}), ("matmul", "quack", "float32", {}),  # 16-bit GEMMs only
               ("attn", "fa4", "float32", {"is_causal": True}), ("attn_varlen", "fa4", "float32", {})]
    for name, lib, dtype, args in refused:
        assert OPS[name][lib].admits_static(dtype, args, ()) is False, (name, lib, dtype, args)
    admitted = [("jsd", "liger", "bfloat16", {}), ("linear_cross_entropy", "fla", "bfloat16", {"reduction": "sum"}),
                ("group_norm", "liger", "bfloat16", {}), ("attn", "fla", "float16", {"is_causal": True}),
                ("attn_varlen", "fla", "bfloat16", {"causal": True}),
                ("cross_entropy", "quack", "bfloat16", {"label_smoothing": 0.0}),
                ("rms_norm", "cudnn", "float32", {}), ("layer_norm", "cudnn", "bfloat16", {}),
                ("linear", "quack", "bfloat16", {}), ("matmul", "quack", "float16", {}),
                ("attn", "fa4", "bfloat16", {"is_causal": False}), ("attn_varlen", "fa4", "float16", {"causal": False})]
    for name, lib, dtype, args in admitted:
        assert OPS[name][lib].admits_static(dtype, args, ()) is True, (name, lib, dtype, args)


@pytest.fixture
def installed(monkeypatch):
    """Every library counts as installed, so rejects() reaches the gates and predicates."""
    from popcorn.core.backends import Backend

    monkeypatch.setattr(Backend, "problem", lambda self: None)


@pytest.fixture
def cuda(monkeypatch):
    """Tensors count as on a CUDA device of compute capability 9.0."""
    from popcorn.core import devices

    monkeypatch.setattr(devices, "on_cuda", lambda **a: True)
    monkeypatch.setattr(devices, "_capability", lambda index: (9, 0))
    for name in OPS:
        module = sys.modules[f"popcorn.kernels.{name}"]
        if hasattr(module, "on_cuda"):
            monkeypatch.setattr(module, "on_cuda", lambda **a: True)
        if hasattr(module, "on_sm90"):
            monkeypatch.setattr(module, "on_sm90", devices.on_sm90)


def test_teachers_and_targets_given_no_gradient_send_those_calls_elsewhere(installed):
    x = torch.randn(3, 5).log_softmax(-1)
    for name in ("jsd", "kl_div"):
        impl = OPS[name]["liger"]
        assert impl.no_grad == ("target",)
        student = x.clone().requires_grad_()
        assert impl.rejects({"input": student, "target": x.clone().requires_grad_()}, grad=True) \
            .startswith("gives no gradient to target")
        assert "predicate" in impl.rejects({"input": student, "target": x}, grad=True)  # CPU: declined
    assert OPS["jsd"]["liger"].expected_dtypes({"input": x.bfloat16()}) == {0: torch.bfloat16}


def test_fla_logsumexp_has_no_backward(installed):
    impl = OPS["logsumexp"]["fla"]
    assert impl.forward_only
    assert "forward_only" in impl.rejects({"x": torch.randn(2, 4, requires_grad=True)}, grad=True)


def test_liger_linear_cross_entropy_declines_weight_gradients_without_x_gradients(cuda):
    impl = OPS["linear_cross_entropy"]["liger"]
    x, target = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])
    weight = torch.randn(5, 8, requires_grad=True)
    call = {"x": x, "weight": weight, "target": target, "bias": None, "reduction": "mean"}
    assert impl.predicate(**call) is False  # liger would leave weight.grad None
    assert impl.predicate(**(call | {"reduction": "none"})) is True  # recomputed in its backward
    assert impl.predicate(**(call | {"x": x.requires_grad_()})) is True
    with torch.no_grad():
        assert impl.predicate(**call) is True
    frozen = {"x": torch.randn(4, 8), "weight": torch.randn(5, 8), "target": target, "reduction": "sum",
              "bias": torch.zeros(5, requires_grad=True)}
    assert impl.predicate(**frozen) is False


def test_predicates_on_sizes(cuda):
    meta = dict(device="meta")
    group_norm = OPS["group_norm"]["fla"].predicate
    assert group_norm(x=torch.empty(2, 32, 8, **meta), num_groups=8) is True
    assert group_norm(x=torch.empty(2, 32, 8192, **meta), num_groups=1) is False  # a 1 MB group
    embedding = OPS["embedding"]["liger"].predicate
    table = torch.empty(100, 64, **meta)
    assert embedding(input=torch.empty(8, 16, dtype=torch.int64, **meta), weight=table) is True
    assert embedding(input=torch.empty(0, dtype=torch.int64, **meta), weight=table) is False
    assert embedding(input=torch.empty(2**25, dtype=torch.int64, **meta), weight=table) is False
    softmax = OPS["softmax"]["fla"].predicate
    assert softmax(x=torch.empty(2, 2**16, **meta)) is True and softmax(x=torch.empty(2, 2**16 + 1, **meta)) is False
    attn = OPS["attn"]["fla"].predicate
    q = torch.empty(1, 4, 16, 256, dtype=torch.bfloat16, **meta)
    assert attn(q=q, k=q, v=q) is True
    wide = torch.empty(1, 4, 16, 512, dtype=torch.bfloat16, **meta)
    assert attn(q=wide, k=wide, v=wide) is False
    assert OPS["attn_varlen"]["fla"].predicate is attn


def test_row_kernels_declare_their_row_limits(cuda):
    """liger's row kernels (calculate_settings) take rows of at most 64K elements, fla's layer-norm
    kernels rows of at most 64 KB: larger rows run another backend rather than fail at launch."""
    meta = dict(device="meta")
    for name in ("rms_norm", "add_rms_norm", "layer_norm", "softmax"):
        liger = OPS[name]["liger"].predicate
        assert liger(x=torch.empty(2, 65536, **meta)) is True, name
        assert liger(x=torch.empty(2, 65537, dtype=torch.bfloat16, **meta)) is False, name
    for name in ("rms_norm", "add_rms_norm", "layer_norm", "l2_norm"):
        fla = OPS[name]["fla"].predicate
        assert fla(x=torch.empty(2, 32768, dtype=torch.bfloat16, **meta)) is True, name
        assert fla(x=torch.empty(2, 32768, dtype=torch.float32, **meta)) is False, name  # 128 KB
        assert fla(x=torch.empty(2, 16384, dtype=torch.float32, **meta)) is True, name


def test_quack_needs_hopper_and_whole_vectors(cuda, monkeypatch):
    from popcorn.core import devices

    meta = dict(device="meta")
    softmax, ce, rms = (OPS[n]["quack"].predicate for n in ("softmax", "cross_entropy", "rms_norm"))
    row = torch.empty(4, 4096, dtype=torch.bfloat16, **meta)
    assert softmax(x=row) is True
    assert softmax(x=torch.empty(4, 17, dtype=torch.bfloat16, **meta)) is False  # 17 is no whole 16-byte vector
    assert softmax(x=torch.empty(4, 12, dtype=torch.float32, **meta)) is True  # 3 fp32 vectors
    assert softmax(x=torch.empty(1, 300 * 1024, dtype=torch.bfloat16, **meta)) is False
    assert ce(logits=torch.empty(4, 32000, dtype=torch.bfloat16, **meta), target=None) is True
    assert ce(logits=torch.empty(4, 50257, dtype=torch.bfloat16, **meta), target=None) is False
    assert rms(x=torch.empty(2, 200 * 1024, dtype=torch.bfloat16, **meta)) is True
    assert rms(x=torch.empty(2, 200 * 1024, dtype=torch.float32, **meta)) is False  # its fp32 backward stops at 128k
    assert OPS["add_rms_norm"]["quack"].predicate is rms
    # GEMMs: every operand's contiguous dim (in_features / inner, out_features / cols) in whole vectors
    linear, matmul = OPS["linear"]["quack"].predicate, OPS["matmul"]["quack"].predicate
    bf16 = dict(dtype=torch.bfloat16, **meta)
    assert linear(input=torch.empty(3, 7, 4096, **bf16), weight=torch.empty(1024, 4096, **bf16), bias=None) is True
    assert linear(input=torch.empty(5, 4100, **bf16), weight=torch.empty(1024, 4100, **bf16), bias=None) is False
    assert linear(input=torch.empty(5, 4096, **bf16), weight=torch.empty(1020, 4096, **bf16), bias=None) is False
    assert matmul(a=torch.empty(2, 5, 64, **bf16), b=torch.empty(64, 128, **bf16)) is True  # 5 rows: any count
    assert matmul(a=torch.empty(5, 60, **bf16), b=torch.empty(60, 128, **bf16)) is False
    assert matmul(a=torch.empty(5, 64, **bf16), b=torch.empty(64, 100, **bf16)) is False
    monkeypatch.setattr(devices, "_capability", lambda index: (8, 0))
    assert softmax(x=row) is False  # an A100: quack's kernels are built for Hopper and newer
    assert matmul(a=torch.empty(5, 64, **bf16), b=torch.empty(64, 128, **bf16)) is False


def test_fa4_needs_hopper_whole_vector_heads_and_int32_boundaries(cuda, monkeypatch):
    from popcorn.core import devices

    bf16 = dict(dtype=torch.bfloat16, device="meta")
    attn, varlen = OPS["attn"]["fa4"].predicate, OPS["attn_varlen"]["fa4"].predicate
    q, kv = torch.empty(2, 32, 128, 128, **bf16), torch.empty(2, 8, 128, 128, **bf16)
    assert attn(q=q, k=kv, v=kv) is True
    wide = torch.empty(1, 4, 16, 256, **bf16)
    assert attn(q=wide, k=wide, v=wide) is True  # SM90 kernels take heads up to 256
    odd = torch.empty(1, 4, 16, 100, **bf16)
    assert attn(q=odd, k=odd, v=odd) is False  # 100 is no whole 16-byte vector of bf16
    empty = torch.empty(1, 4, 0, 64, **bf16)
    assert attn(q=empty, k=empty, v=empty) is False
    packed = torch.empty(96, 8, 64, **bf16)
    cu = torch.empty(4, dtype=torch.int32, device="meta")
    assert varlen(q=packed, k=packed, v=packed, cu_seqlens=cu) is True
    assert varlen(q=packed, k=packed, v=packed, cu_seqlens=cu.long()) is False  # its kernel asserts int32
    monkeypatch.setattr(devices, "_capability", lambda index: (10, 0))
    assert attn(q=wide, k=wide, v=wide) is False  # SM100 kernels: heads up to 128
    assert attn(q=q, k=kv, v=kv) is True
    monkeypatch.setattr(devices, "_capability", lambda index: (8, 0))
    assert attn(q=q, k=kv, v=kv) is False  # validated on Hopper and newer


def test_cudnn_norms_take_the_parameter_dtypes_its_graphs_do(cuda):
    meta = dict(device="meta")
    rms, layer = OPS["rms_norm"]["cudnn"].predicate, OPS["layer_norm"]["cudnn"].predicate
    x = torch.empty(4, 4096, dtype=torch.bfloat16, **meta)
    same, fp32 = torch.empty(4096, dtype=torch.bfloat16, **meta), torch.empty(4096, **meta)
    assert rms(x=x, weight=same) is True
    assert rms(x=x, weight=fp32) is False  # one I/O type per rms_norm graph
    assert layer(x=x, weight=fp32, bias=fp32) is True  # fp32 parameters beside a half-precision input
    assert layer(x=x, weight=same, bias=None) is True
    assert layer(x=x, weight=same, bias=fp32) is False  # weight and bias of one dtype
    assert layer(x=torch.empty(4, 4096, **meta), weight=same, bias=None) is False  # bf16 weight, fp32 input


def test_dense_copies_only_what_vectorized_loads_cannot_read():
    x = torch.randn(4, 8)
    assert dense(x) is x
    strided = x.t()
    assert dense(strided).is_contiguous() and torch.equal(dense(strided), strided)
    shifted = torch.randn(33)[1:].view(4, 8)  # 4 bytes past an aligned start
    assert shifted.data_ptr() % 16 and dense(shifted).data_ptr() % 16 == 0
    assert torch.equal(dense(shifted), shifted)
