"""Dispatch: each op call runs the fastest backend the published evidence says is correct.

The decision (:mod:`.decide`) is made once per call signature and memoized on the Op, so later
calls pay a key and a dict lookup. ``use(...)`` scopes a backend preference; ``explain`` says
which backend a call would run and why, citing records.
"""

from __future__ import annotations

import contextlib

from popcorn.core import hotpath, registry

from . import evidence
from .decide import decide

_OPS: dict = {}  # ops that memoized decisions, by name


def _dispatch(op, arguments: dict, grad: bool):
    _OPS[op.name] = op
    return op.implementations[decide(op, arguments, grad).impl]


def forget(op_name: str | None = None) -> None:
    """New evidence for ``op_name`` (all ops when None): decide their calls afresh."""
    if op_name is None:
        evidence.reset()
        for op in _OPS.values():
            op.forget()
        return
    evidence._ROWS.pop(op_name, None)
    if op_name in _OPS:
        _OPS[op_name].forget()


@contextlib.contextmanager
def use(*backends: str):
    """Within the block, calls run the first of ``backends`` that admits them (else dispatch as usual)."""
    with hotpath.prefer(backends):
        yield


def explain(op, *args, **kwargs) -> str:
    """Which backend ``op(*args, **kwargs)`` would run, and why, citing the records."""
    arguments = op.arguments(args, kwargs)
    return decide(op, arguments, op.needs_grad(arguments)).explain()


registry.DISPATCHER = _dispatch
