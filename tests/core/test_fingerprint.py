from popcorn.core.fingerprint import fingerprint

BASE = '''
def f(x, eps=1e-6):
    """Doc."""
    y = x * 2  # double
    return y + eps
'''


def test_stable_under_comments_docstrings_and_decorators():
    edited = '''
@some.decorator(arg=1)
def f(x, eps=1e-6):
    """A completely different docstring."""
    # a new comment
    y = x * 2

    return y + eps  # trailing
'''
    assert fingerprint(BASE) == fingerprint(edited)


def test_changed_by_code_edits():
    assert fingerprint(BASE) != fingerprint(BASE.replace("x * 2", "x * 3"))
    assert fingerprint(BASE) != fingerprint(BASE.replace("eps=1e-6", "eps=1e-5"))
    assert fingerprint(BASE) != fingerprint(BASE.replace("return y + eps", "return y - eps"))


def test_functions_hash_their_source():
    def g(x):
        """doc"""
        return x + 1
    assert fingerprint(g) == fingerprint("def g(x):\n    return x + 1\n")
    assert len(fingerprint(g)) == 12


def test_kernel_fingerprints_are_present():
    from popcorn.kernels import rms_norm
    assert len(rms_norm.ref_hash) == 12
    assert rms_norm["compile"].impl_hash != rms_norm["torch"].impl_hash


def test_closed_over_values_count():
    def factory(block):
        def kernel(x):
            return x * block
        return kernel
    assert fingerprint(factory(2)) != fingerprint(factory(3))
    assert fingerprint(factory(2)) == fingerprint(factory(2))


def test_sdpa_backends_have_distinct_fingerprints():
    from popcorn.kernels import attn
    hashes = {attn[n].impl_hash for n in ("sdpa:flash", "sdpa:efficient", "sdpa:cudnn", "sdpa:math")}
    assert len(hashes) == 4


def test_same_hash_on_every_python_this_machine_has():
    # Records made on the GPU machines (Python 3.12) must match code hashed here (3.11) and elsewhere.
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    module = Path(__file__).parents[2] / "popcorn" / "core" / "fingerprint.py"
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('fp', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.fingerprint(sys.argv[2]))")
    source = "def f(x: int, *, eps=1e-6) -> int:\n    return [y async for y in x] if eps else x\n"
    hashes = {f"{sys.version_info[0]}.{sys.version_info[1]}": fingerprint(source)}
    for exe in sorted(Path.home().glob(".pyenv/versions/3.1[1-9]*/bin/python3")):
        out = subprocess.run([str(exe), "-c", code, str(module), source], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        hashes[exe.parts[-3]] = out.stdout.strip()
    if len(hashes) < 2:
        pytest.skip("no other Python 3.11+ interpreter on this machine to compare with")
    assert len(set(hashes.values())) == 1, hashes


# -- transitive fingerprints: every line an implementation runs ----------------------------------

PROJECT_CORE = '''
SCALE = {3, 1, 2}

def helper(x):
    return x * 2
'''

PROJECT_OPS = '''
from fpproj import core
from fpproj.core import helper


def _local(x):
    return x + 1


def ref(x):
    return _local(helper(x)) + core.helper(x) + len(core.SCALE)


def factory(block):
    def adapter(x):
        return helper(x) * block
    return adapter
'''


def _project(root, core=PROJECT_CORE, ops=PROJECT_OPS):
    pkg = root / "fpproj"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(core)
    (pkg / "ops.py").write_text(ops)


def _hash_in_fresh_process(root, expr, python=None, env=None):
    import os
    import subprocess
    import sys
    from pathlib import Path

    module = Path(__file__).parents[2] / "popcorn" / "core" / "fingerprint.py"
    code = ("import importlib.util, sys; sys.path.insert(0, sys.argv[2]); "
            "spec = importlib.util.spec_from_file_location('fp', sys.argv[1]); m = importlib.util.module_from_spec(spec); "
            "spec.loader.exec_module(m); m.PROJECT = frozenset({'fpproj'}); import fpproj.ops as ops; "
            f"print(m.fingerprint({expr}))")
    out = subprocess.run([python or sys.executable, "-c", code, str(module), str(root)], capture_output=True,
                         text=True, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_editing_a_helper_in_the_ops_module_changes_the_fingerprint(tmp_path):
    _project(tmp_path)
    before = _hash_in_fresh_process(tmp_path, "ops.ref")
    _project(tmp_path, ops=PROJECT_OPS.replace("return x + 1", "return x + 2"))
    assert _hash_in_fresh_process(tmp_path, "ops.ref") != before


def test_editing_a_helper_or_constant_in_another_module_changes_the_fingerprint(tmp_path):
    _project(tmp_path)
    ref, adapter = _hash_in_fresh_process(tmp_path, "ops.ref"), _hash_in_fresh_process(tmp_path, "ops.factory(4)")
    _project(tmp_path, core=PROJECT_CORE.replace("x * 2", "x * 3"))
    assert _hash_in_fresh_process(tmp_path, "ops.ref") != ref
    assert _hash_in_fresh_process(tmp_path, "ops.factory(4)") != adapter
    _project(tmp_path, core=PROJECT_CORE.replace("{3, 1, 2}", "{3, 1, 4}"))
    assert _hash_in_fresh_process(tmp_path, "ops.ref") != ref


def test_comments_and_docstrings_of_helpers_do_not_count(tmp_path):
    _project(tmp_path)
    before = _hash_in_fresh_process(tmp_path, "ops.ref")
    _project(tmp_path, core=PROJECT_CORE.replace("def helper(x):", "def helper(x):\n    '''Doubles.'''  # why"))
    assert _hash_in_fresh_process(tmp_path, "ops.ref") == before


def test_fingerprints_ignore_the_hash_seed_and_python_version(tmp_path):
    from pathlib import Path

    _project(tmp_path)
    expr = "ops.ref, ops.factory(frozenset({'a', 'b', 'c', 'd'})), declared=repr(sorted({'x'}))"
    seen = {_hash_in_fresh_process(tmp_path, expr, env={"PYTHONHASHSEED": str(seed)}) for seed in range(5)}
    assert len(seen) == 1, seen
    for exe in sorted(Path.home().glob(".pyenv/versions/3.1[1-9]*/bin/python3")):
        assert _hash_in_fresh_process(tmp_path, expr, python=str(exe)) in seen, exe


def test_a_core_helper_is_part_of_every_reference_that_calls_it(tmp_path, monkeypatch):
    import importlib
    import inspect
    import sys

    import popcorn.core.numerics as numerics
    from popcorn.kernels import rms_norm

    before = fingerprint(rms_norm.reference)
    assert before == rms_norm.ref_hash
    # core/numerics.py as it would read after an edit of upcast, imported from a copy
    edited = inspect.getsource(numerics).replace("return t.float() if", "return t.double() if")
    assert edited != inspect.getsource(numerics)
    (tmp_path / "numerics_edited.py").write_text(edited)
    monkeypatch.syspath_prepend(str(tmp_path))
    upcast = importlib.import_module("numerics_edited").upcast
    upcast.__module__ = "popcorn.core.numerics"
    monkeypatch.setitem(rms_norm.reference.__globals__, "upcast", upcast)
    assert fingerprint(rms_norm.reference) != before
    sys.modules.pop("numerics_edited")


def test_a_source_kernel_in_another_module_is_fingerprinted_through_its_helpers(tmp_path, monkeypatch):
    import importlib
    import sys

    from popcorn.core import register_kernel
    from popcorn.core.shapes import Float

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "fpkernels.py").write_text("def _scale(x):\n    return x * 2\n\ndef kernel(x):\n    return _scale(x)\n")

    @register_kernel(compile=False)
    def toy_fp(x: Float["n"]) -> Float["n"]:
        """Toy op.

        $$y = 2x$$
        """
        return x * 2

    toy_fp.register("popcorn", source="fpkernels:kernel")
    before = toy_fp["popcorn"].impl_hash
    (tmp_path / "fpkernels.py").write_text("def _scale(x):\n    return x * 3\n\ndef kernel(x):\n    return _scale(x)\n")
    sys.modules.pop("fpkernels")
    importlib.invalidate_caches()
    toy_fp.implementations.pop("popcorn")
    toy_fp.register("popcorn", source="fpkernels:kernel")
    assert toy_fp["popcorn"].impl_hash != before


def test_gated_backends_hash_the_same_in_every_process():
    import os
    import subprocess
    import sys

    code = ("from popcorn.kernels import OPS; print(sorted((o.name, n, o.ref_hash, i.impl_hash) "
            "for o in OPS.values() for n, i in o.implementations.items()))")
    seen = set()
    for seed in range(5):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)})
        assert out.returncode == 0, out.stderr
        seen.add(out.stdout)
    assert len(seen) == 1


def test_an_attribute_named_like_a_global_is_not_followed():
    # softmax's reference calls torch.softmax; the module global `softmax` is the Op itself, whose
    # class (the registry) is no code the reference runs
    from popcorn.core.fingerprint import PROJECT, _Walk
    from popcorn.kernels import OPS

    for name in ("softmax", "logsumexp", "embedding", "linear", "layer_norm", "group_norm"):
        walk = _Walk(set(PROJECT))
        walk.visit(OPS[name].reference, root=True)
        assert not any(p.startswith("popcorn.core.registry") for p in walk.parts), name
