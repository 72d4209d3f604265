"""The per-op call path, generated from the op's signature.

A decided call must cost a key and a dict lookup. A generic ``__call__(*args, **kwargs)`` that
loops over its arguments testing each for a tensor costs ~4 us beside a small CPU kernel
(benchmarks/dispatch_overhead.py). The generated ``__call__`` has the reference's own parameters,
so Python binds them natively, the key reads only what the decision depends on, and a call made
with keywords or positionally gets one key. ``key`` is generated from the same text, so the slow
path memoizes under exactly the key the hot path looks up.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

# Backends a `with popcorn.use(...)` block prefers, innermost first.
PREFERENCE: contextvars.ContextVar[tuple] = contextvars.ContextVar("popcorn_preference", default=())
# Open `use` blocks in any thread: only while some are open does a key read the per-context
# preference (a ContextVar read costs more than the rest of a one-tensor key).
SCOPES = 0

grad_enabled, dynamo_compiling, tc = torch.is_grad_enabled, torch.compiler.is_dynamo_compiling, torch.compiler
# torch.compile and torch.export set this flag (is_compiling() reads it at twice the cost)
_COMPILING = "tc._is_compiling_flag" if hasattr(tc, "_is_compiling_flag") else "tc.is_compiling()"


@contextlib.contextmanager
def prefer(backends: tuple):
    global SCOPES
    token = PREFERENCE.set(tuple(backends) + PREFERENCE.get())
    SCOPES += 1
    try:
        yield
    finally:
        SCOPES -= 1
        PREFERENCE.reset(token)


def _key_source(op) -> str:
    parts = ["SCOPES and PREFERENCE.get()", "grad_enabled()"]
    for name in op.signature.parameters:
        spec = op.specs.get(name)
        if spec is None:
            parts.append(name)
            continue
        attrs = f"{name}.shape, {name}.dtype, {name}.get_device(), {name}.requires_grad"
        parts.append(f"(({attrs}) if {name} is not None else None)" if spec.optional else attrs)
    return ", ".join(parts)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()  # a required argument the caller left out: the slow path reports it


def slow(op, named: dict, extra: tuple, unknown: dict, backend, bench):
    """The generic path: binding errors worded by the op, scoped or forced backends, new signatures."""
    if extra:  # too many positional arguments: binding them reports it
        return op._call(tuple(named.values()) + extra, unknown, backend, bench)
    return op._call((), {n: v for n, v in named.items() if v is not MISSING} | unknown, backend, bench)


def build(op) -> tuple[type, object]:
    """(a subclass of ``type(op)`` whose ``__call__`` is generated for ``op``, its key function)."""
    call_params, key_params, positional, keywords = [], [], [], []
    for p in op.signature.parameters.values():
        if p.kind is p.POSITIONAL_ONLY:
            raise ValueError(f"{op.name}: positional-only parameters are not supported; drop the '/'")
        if p.kind is p.KEYWORD_ONLY and not keywords:
            call_params.append("*_extra")
            key_params.append("*")
        default = "MISSING" if p.default is p.empty else f"_defaults[{p.name!r}]"
        call_params.append(f"{p.name}={default}")
        key_params.append(p.name if p.default is p.empty else f"{p.name}={default}")
        (keywords if p.kind is p.KEYWORD_ONLY else positional).append(p.name)
    if not keywords:
        call_params.append("*_extra")
    names = positional + keywords
    key_s = _key_source(op)
    passed = ", ".join(positional + [f"{k}={k}" for k in keywords])
    named = ", ".join(f"{n!r}: {n}" for n in names)
    src = f"""
def make(memo, benched, _defaults):
    def __call__(self, {", ".join(call_params)}, backend=None, bench=None, **_unknown):
        if backend is None and not _extra and not _unknown:
            if self.library is not None and (dynamo_compiling() or {_COMPILING}):
                return self.traced({passed})  # decided while tracing; no graph break
            try:  # bench=True: signatures whose case already has evidence decide like plain calls
                fn = (benched if bench else memo)[({key_s})]
            except (KeyError, TypeError, AttributeError):  # new signature, unhashable or missing argument
                pass
            else:
                return fn({passed})  # outside the try: a kernel's own KeyError must not rerun the call
        return slow(self, {{{named}}}, _extra, _unknown, backend, bench)

    def key({", ".join(key_params)}):
        return ({key_s})

    return __call__, key
"""
    namespace: dict = {}
    # this module's globals: SCOPES is read live; the memo is a closure cell (forget() clears it in place)
    exec(compile(src, f"<popcorn.{op.name} call path>", "exec"), globals(), namespace)  # our own text, from the signature
    call, key = namespace["make"](op._memo, op._benched,
                                  {p.name: p.default for p in op.signature.parameters.values()})
    call.__qualname__ = call.__name__ = op.name
    cls = type(type(op).__name__, (type(op),), {"__call__": call, "__module__": type(op).__module__})
    return cls, key
