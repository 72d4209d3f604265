"""Dispatch: each op call runs the fastest backend the published evidence says is correct.

The decision (:mod:`.decide`) is made once per call signature and memoized on the Op, so later
calls pay a key and a dict lookup. ``use(...)`` scopes a backend preference; ``explain`` says
which backend a call would run and why, citing records.
"""

from __future__ import annotations

import contextlib
import logging

from popcorn.core import hotpath, registry

from . import evidence
from .decide import decide

_OPS: dict = {}  # ops that memoized decisions, by name
log = logging.getLogger("popcorn.dispatch")


def _dispatch(op, arguments: dict, grad: bool, graph: bool = False):
    _OPS[op.name] = op
    decision = decide(op, arguments, grad, graph=graph)
    if log.isEnabledFor(logging.INFO):  # once per call signature: the memo answers later calls
        shapes = " ".join(f"{k}={tuple(v.shape)}" for k, v in arguments.items() if hasattr(v, "shape"))
        log.info("%s(%s) grad=%s %s: %s", op.name, shapes, grad, "in a compiled graph" if graph else "eager",
                 decision.explain(_named).splitlines()[0])
    return op.implementations[decision.impl]


def forget(op_name: str | None = None) -> None:
    """New evidence for ``op_name`` (all ops when None): decide their calls afresh."""
    if op_name is None:
        evidence.reset()
        for op in _OPS.values():
            op.forget()
        return
    evidence.forget(op_name)
    if op_name in _OPS:
        _OPS[op_name].forget()


def _known_backends() -> set[str]:
    from popcorn.core.backends import BACKENDS

    names = set(BACKENDS)
    for op in list(registry.INSTANCES):
        names.update(op.implementations)
    return names


@contextlib.contextmanager
def use(*backends: str):
    """Within the block, calls run the first of ``backends`` that admits them (else dispatch as usual).
    A name no op registers and no family declares raises ValueError (a typo would silently do nothing)."""
    known = _known_backends()
    unknown = [b for b in backends if b not in known]
    if unknown:
        import difflib

        hints = [f"'{b}' (did you mean '{m[0]}'?)" if (m := difflib.get_close_matches(b, known, 1)) else f"'{b}'"
                 for b in unknown]
        raise ValueError(f"popcorn.use: unknown backend {', '.join(hints)}; known: {', '.join(sorted(known))}")
    with hotpath.prefer(backends):
        yield


def _named(impl: str) -> str:
    return "torch (popcorn's pure-PyTorch reference)" if impl == registry.REFERENCE else impl


def explain(op, *args, backend: str | None = None, **kwargs) -> str:
    """Which backend ``op(*args, **kwargs)`` runs here and why, citing the records; with ``backend=`` or
    inside ``popcorn.use``, the forced or preferred backend; how to get evidence where there is none."""
    arguments = op.arguments(args, kwargs)
    grad = op.needs_grad(arguments)
    decision = decide(op, arguments, grad)
    if backend is not None:
        reason = op[backend].rejects(arguments, grad)
        head = (f"runs {_named(backend)}: forced by backend='{backend}'" if reason is None else
                f"raises DispatchError: backend '{backend}' rejects the call ({reason})")
        return head + "\nwithout backend=, dispatch would choose:\n" + _indent(decision.explain(_named))
    for name in hotpath.PREFERENCE.get():
        impl = op.implementations.get(name)
        if impl is not None and impl.rejects(arguments, grad) is None:
            return (f"runs {_named(name)}: preferred by popcorn.use({name!r})\n"
                    "outside the block, dispatch would choose:\n" + _indent(decision.explain(_named)))
    text = decision.explain(_named)
    in_graph = decide(op, arguments, grad, graph=True)
    text += (f"\ninside torch.compile (device time alone ranks there): runs {_named(in_graph.impl)}"
             + ("" if in_graph.impl == decision.impl else "; host time per call decides it in eager code"))
    if any(not v.eligible and v.why.startswith("no evidence") for v in decision.verdicts):
        text += (f"\nto measure this exact call here: call it once with bench=True (or set POPCORN_BENCH=1); "
                 f"to fill the op's case plan: popcorn bench fill {op.name}")
    return text


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())

