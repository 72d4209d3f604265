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
