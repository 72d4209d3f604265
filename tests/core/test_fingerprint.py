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
