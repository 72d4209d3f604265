"""torch.library integration: each single-output op is also ``torch.ops.popcorn.<name>``.

Under torch.compile an Op call becomes one opaque custom op: its fake (meta) implementation is
the reference, so tracing never breaks the graph, and at run time it dispatches like an eager
call. Backward replays the forward through the dispatcher on detached inputs and differentiates
that (one extra forward), so gradients come from whichever backend was chosen.
"""

from __future__ import annotations

import inspect
import typing

import torch

_SCALAR = {float: "float", int: "int", bool: "bool", str: "str"}


def _schema_type(param: inspect.Parameter, spec) -> str:
    if spec is not None:
        return "Tensor?" if spec.optional else "Tensor"
    ann, default = param.annotation, param.default
    if typing.get_origin(ann) is typing.Literal:
        ann = type(typing.get_args(ann)[0])
    optional = False
    args = typing.get_args(ann)
    if args and type(None) in args:
        optional, ann = True, next(a for a in args if a is not type(None))
    if ann not in _SCALAR:
        ann = type(default)
    if ann not in _SCALAR:
        raise TypeError(f"no torch schema type for parameter '{param.name}' ({param.annotation!r})")
    return _SCALAR[ann] + ("?" if optional or default is None else "")


def _default(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


def schema(op) -> str:
    parts = []
    for p in op.signature.parameters.values():
        t = _schema_type(p, op.specs.get(p.name))
        parts.append(f"{t} {p.name}" + ("" if p.default is inspect.Parameter.empty else f"={_default(p.default)}"))
    return f"({', '.join(parts)}) -> Tensor"


def define(op):
    """Register ``torch.ops.popcorn.<op>`` for a single-output op; returns the custom op."""
    lib_name = f"popcorn::{op.name}"

    def run(*args):
        return op._call(args, {}, None, False)

    def fake(*args):
        return op.reference(*args)

    custom = torch.library.custom_op(lib_name, run, mutates_args=(), schema=schema(op))
    custom.register_fake(fake)

    def setup_context(ctx, inputs, output):
        ctx.inputs = inputs
        ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)])

    def backward(ctx, grad):
        saved = iter(ctx.saved_tensors)
        args, leaves = [], []
        for value in ctx.inputs:
            if isinstance(value, torch.Tensor):
                t = next(saved).detach()
                if t.is_floating_point():
                    t.requires_grad_(True)
                    leaves.append(t)
                args.append(t)
            else:
                args.append(value)
        with torch.enable_grad():
            out = op._call(tuple(args), {}, None, False)
            grads = iter(torch.autograd.grad(out, leaves, grad, allow_unused=True))
        return tuple(next(grads) if isinstance(a, torch.Tensor) and a.is_floating_point() else None for a in args)

    custom.register_autograd(backward, setup_context=setup_context)
    return custom
