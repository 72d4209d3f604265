"""torch.compile integration: calls decided while tracing, and ``torch.ops.popcorn.<name>`` custom ops.

A call inside torch.compile is decided once, while dynamo traces it (:func:`traced_call`): the
decision runs eagerly on the call's shapes, dtypes and devices and enters the graph as a constant.
When it picks the reference or the compile backend, the reference itself is traced, so the graph
costs what the same model calling it directly costs and inductor fuses it with its neighbours.
Any other backend runs as one opaque custom op:

Under torch.compile an Op call becomes one opaque custom op: its fake (meta) implementation is
the reference, so tracing never breaks the graph, and at run time it dispatches like an eager
call. Backward replays the forward through the dispatcher on detached inputs and differentiates
that (one extra forward), so gradients come from whichever backend was chosen.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import operator
import typing

import torch

from .implementation import REFERENCE

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


_LIB = torch.library.Library("popcorn", "DEF")  # every op's schema and kernels; lives as long as the process
_AUTOGRAD_KEYS = [k for k in torch._C.DispatchKey.__members__.values() if k.name.startswith("Autograd")]


@contextlib.contextmanager
def _autograd_on():
    """Autograd inside a custom op's implementation, which runs below the autograd dispatch keys:
    the backward op replays the forward there and differentiates it (grad mode alone is not enough)."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in _AUTOGRAD_KEYS:
        if exclude.has(key):
            exclude = exclude.remove(key)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude), torch.enable_grad():
        yield


def _params(op, *, keyword_marker: bool = True) -> list[str]:
    parts = []
    for p in op.signature.parameters.values():
        t = _schema_type(p, op.specs.get(p.name))
        parts.append(f"{t} {p.name}" + ("" if p.default is inspect.Parameter.empty else f"={_default(p.default)}"))
    kinds = [p.kind for p in op.signature.parameters.values()]
    if keyword_marker and inspect.Parameter.KEYWORD_ONLY in kinds:
        parts.insert(kinds.index(inspect.Parameter.KEYWORD_ONLY), "*")
    return parts


def schema(op) -> str:
    returns = "Tensor" if len(op.outputs) == 1 else "(" + ", ".join("Tensor" for _ in op.outputs) + ")"
    return f"({', '.join(_params(op))}) -> {returns}"


def backward_schema(op) -> str:
    """``<op>_backward(grads, *inputs)``: the input gradients, one per floating tensor input passed."""
    return f"({', '.join(['Tensor?[] grads'] + _params(op, keyword_marker=False))}) -> Tensor[]"


def _flattener(op):
    """(args, kwargs) of a generated call path (positional parameters by position, keyword-only ones by
    name) -> every argument in signature order."""
    names = list(op.signature.parameters)

    def flat(args: tuple, kwargs: dict) -> tuple:
        return args + tuple(kwargs[n] for n in names[len(args):] if n in kwargs)
    return flat


def define(op):
    """Register ``torch.ops.popcorn.<op>`` (one or several tensor outputs) and its backward; returns the op.

    Forward and backward are both opaque custom ops: tracing never enters popcorn's Python dispatch
    or a reference that reads tensor values; at run time both dispatch like eager calls.
    """
    params = list(op.signature.parameters.values())
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    n_pos = len(params) - len(keyword)
    single = len(op.outputs) == 1
    ordered = _flattener(op)

    def call(args: tuple):
        """A memoized decision first (ranked by device time: inside a graph the host cost per call is gone),
        so a compiled call costs what a decided eager call costs."""
        pos, kw = args[:n_pos], dict(zip(keyword, args[n_pos:]))
        try:
            fn = op._graph_memo[op._key(*pos, **kw)]
        except (KeyError, TypeError, AttributeError):  # bench mode never runs inside a compiled graph
            return op._call(pos, kw, None, False, graph=True)
        return fn(*pos, **kw)

    # Outputs are contiguous on both sides: a compiled graph plans its views on the fake's strides, and
    # backends (or the reference's autograd) may return other strides than the reference's fake run.
    def run(*args, **kwargs):
        out = call(ordered(args, kwargs))
        return out.contiguous() if single else tuple(o.contiguous() for o in out)

    def fake(*args, **kwargs):
        out = op.fake(*args, **kwargs)
        return out.contiguous() if single else tuple(o.contiguous() for o in out)

    def backward_run(grads, *args):
        """Replay the forward through dispatch on detached inputs and differentiate that (one extra forward)."""
        args = [a.detach().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a for a in args]
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        with _autograd_on():
            out = call(tuple(args))
            outs = (out,) if single else tuple(out)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            found = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True) \
                if pairs else [None] * len(leaves)
        # a custom op's outputs may not alias its inputs or each other (a residual's gradient is often the
        # incoming gradient itself, shared by two inputs): copy those
        taken = {g.untyped_storage().data_ptr() for g in grads if g is not None}
        out = []
        for g, t in zip(found, leaves):
            if g is None:
                g = torch.zeros(t.shape, dtype=t.dtype, device=t.device)
            elif g.untyped_storage().data_ptr() in taken:
                g = g.clone()
            g = g.contiguous()
            taken.add(g.untyped_storage().data_ptr())
            out.append(g)
        return out

    def backward_fake(grads, *args):
        return [torch.empty(a.shape, dtype=a.dtype, device=a.device) for a in args
                if isinstance(a, torch.Tensor) and a.is_floating_point()]

    # The low-level registration: a compiled graph calls the kernel through the dispatcher alone
    # (torch.library.custom_op's Python layers cost ~30 us per call on CPU).
    _LIB.define(f"{op.name}{schema(op)}")
    _LIB.impl(op.name, run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"popcorn::{op.name}", fake, lib=_LIB)
    _LIB.define(f"{op.name}_backward{backward_schema(op)}")
    _LIB.impl(f"{op.name}_backward", backward_run, "CompositeExplicitAutograd")
    torch.library.register_fake(f"popcorn::{op.name}_backward", backward_fake, lib=_LIB)
    custom = getattr(torch.ops.popcorn, op.name).default
    grad_op = getattr(torch.ops.popcorn, f"{op.name}_backward").default

    def setup_context(ctx, inputs, output):
        ctx.tensor_at = {i for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)}
        ctx.inputs = [None if i in ctx.tensor_at else v for i, v in enumerate(inputs)]
        ctx.save_for_backward(*[v for v in inputs if isinstance(v, torch.Tensor)])

    def backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        args = [next(saved) if v is None and i in ctx.tensor_at else v for i, v in enumerate(ctx.inputs)]
        found = iter(grad_op(list(grads), *args))
        return tuple(next(found) if isinstance(a, torch.Tensor) and a.is_floating_point() else None for a in args)

    torch.library.register_autograd(f"popcorn::{op.name}", backward, setup_context=setup_context, lib=_LIB)
    return custom


# Backends whose code is the reference: inside a compiled graph they are the reference, traced.
TRACED_AS_REFERENCE = frozenset({REFERENCE, "compile"})


def _spec(value):
    """What a decision reads of an argument, as constants dynamo can pass to an eager function."""
    if isinstance(value, torch.Tensor):
        # a decision is per shape: operator.index makes dynamo specialize a symbolic size (a guard on it)
        # where int() would not, so dynamic-shape graphs recompile per shape popcorn ops see
        return ("tensor", tuple(operator.index(d) for d in value.shape), value.dtype, value.device,
                value.requires_grad)
    if isinstance(value, float):  # likewise for a float dynamo traces symbolically (fsum specializes it)
        return math.fsum((value,))
    if isinstance(value, int) and not isinstance(value, bool):
        return operator.index(value)
    return value


def _stand_in(spec):
    """An argument for the decision: a tensor spec becomes a one-element tensor expanded to its shape."""
    if not (isinstance(spec, tuple) and spec and spec[0] == "tensor"):
        return spec
    _, shape, dtype, device, requires_grad = spec
    return torch.empty((), dtype=dtype, device=device, requires_grad=requires_grad).expand(shape)


def _decide_for_graph(name: str, specs: tuple, grad_enabled: bool) -> str:
    """The backend a call with these argument specs runs inside a compiled graph (run eagerly while
    dynamo traces; its result is a constant of the graph)."""
    op = _TRACED[name]
    arguments = dict(zip(op.signature.parameters, (_stand_in(s) for s in specs)))
    with torch.set_grad_enabled(grad_enabled):
        op.bind(arguments)
        return op.choose(arguments, op.needs_grad(arguments), graph=True).name


# torch._dynamo.assume_constant_result(_decide_for_graph), without importing dynamo on `import popcorn`
# (the decorator sets this flag; tests/dispatch/test_library.py checks it still does)
_decide_for_graph._dynamo_marked_constant = True
_TRACED: dict = {}


def traced_call(op):
    """What ``op(...)`` runs while torch.compile traces it: the reference (traced, fusable) when the
    decision is the reference or compile, else the opaque custom op."""
    _TRACED[op.name] = op
    flat = _flattener(op)
    traceable = op.fake is op.reference  # a reference that reads tensor values (varlen) stays opaque

    def call(*args, **kwargs):
        values = flat(args, kwargs)
        choice = _decide_for_graph(op.name, tuple(_spec(v) for v in values), torch.is_grad_enabled())
        if traceable and choice in TRACED_AS_REFERENCE:
            return op.reference(*args, **kwargs)
        return op.library(*args, **kwargs)
    return call
