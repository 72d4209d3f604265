"""The op registry: a reference function becomes an Op; backends register implementations on it.

``@register_kernel`` returns an :class:`Op` called exactly like the reference (same signature,
defaults and docstring) plus keyword-only ``backend=`` and ``bench=``. The reference ``torch``
and ``compile`` (torch.compile of the reference) are registered on every op.
"""

from __future__ import annotations

import functools
import inspect
import typing
import weakref
from typing import Any, Callable

import torch

from . import hotpath, metadata
from .constraints import check, declared
from .errors import DispatchError
from .fingerprint import fingerprint
from .hotpath import PREFERENCE
from .implementation import REFERENCE, Implementation  # noqa: F401 - REFERENCE re-exported
from .settings import bench_mode
from .shapes import Binding, TensorSpec, bind

# Every op made in this process (popcorn.use checks backend names against their implementations).
INSTANCES: weakref.WeakSet = weakref.WeakSet()


class Layers:
    """What the layers above core provide to an Op, installed by ``popcorn/__init__`` (the one place
    that wires the layers together), so core never imports them.

    ``dispatcher(op, arguments, grad, graph) -> Implementation`` decides undecided calls (None: the
    reference runs); ``harness(name)`` returns the bench layer's ``ensure``/``benchmark``, loaded on
    first use so ``import popcorn`` stays slim."""

    dispatcher: Callable | None = None
    harness: Callable[[str], Callable] | None = None


def install(*, dispatcher: Callable | None = None, harness: Callable | None = None) -> None:
    Layers.dispatcher = dispatcher or Layers.dispatcher
    Layers.harness = harness or Layers.harness


def _scalar_pool(param: inspect.Parameter, declared) -> tuple:
    """Declared values in their order (the first anchors the plan's curves: attn declares is_causal
    [True, False] because training attention is causal, though the default follows SDPA's False; the
    default joins the end if missing), else a Literal's values, [False, True] for bools, else the
    default; undeclared pools put the default first."""
    default = param.default
    if declared is not None:
        values = list(declared)
        if default is not inspect.Parameter.empty and not any(v == default and type(v) is type(default)
                                                               for v in values):
            values.append(default)
        return tuple(values)
    elif typing.get_origin(param.annotation) is typing.Literal:
        values = list(typing.get_args(param.annotation))
    elif param.annotation is bool or isinstance(default, bool):
        values = [False, True]
    else:
        values = [default]
    if default is not inspect.Parameter.empty:
        values = [default] + [v for v in values if v != default or type(v) is not type(default)]
    return tuple(values)


class Op:
    """An op: its reference, contract (annotations, scalar pools, input domains) and implementations."""

    def __init__(self, fn: Callable, *, name: str | None = None, args: dict | None = None,
                 inputs: dict | None = None, tags=(), compile: bool = True, batch: str = "...",
                 workspace: Callable | None = None, fake: Callable | None = None, layout: str | None = None,
                 constraints=(), primary: str | None = None):
        INSTANCES.add(self)
        self.reference = fn
        self.layout = layout  # the tensor layout in words, appended to shape errors
        # shapes and dtypes of the outputs for tracing; the reference unless it reads tensor values
        self.fake = fake or fn
        # what the leading '...' counts (the dims vocabulary entry the plan draws it from)
        self.batch = batch
        # (case) -> elements of the largest intermediate the reference holds beyond its inputs
        self.workspace = workspace
        self.name = name or fn.__name__
        self.signature = inspect.signature(fn, eval_str=True)
        self.specs: dict[str, TensorSpec] = {}
        self.scalars: dict[str, Any] = {}
        for p in self.signature.parameters.values():
            if isinstance(p.annotation, TensorSpec):
                if p.annotation.optional and p.default is not None:
                    raise ValueError(f"{self.name}: optional tensor '{p.name}' must default to None")
                self.specs[p.name] = p.annotation
            elif p.default is inspect.Parameter.empty:
                raise ValueError(f"{self.name}: '{p.name}' is neither an annotated tensor nor a scalar with a default")
            else:
                self.scalars[p.name] = p.default
        unknown = set(args or {}) - set(self.scalars)
        if unknown:
            raise ValueError(f"{self.name}: scalar pools for unknown parameters {sorted(unknown)}")
        self.arg_pools = {n: _scalar_pool(self.signature.parameters[n], (args or {}).get(n)) for n in self.scalars}
        self.domains = dict(inputs or {})
        if set(self.domains) - set(self.specs):
            raise ValueError(f"{self.name}: input domains for unknown tensors {sorted(set(self.domains) - set(self.specs))}")
        ret = self.signature.return_annotation
        self.outputs: tuple[TensorSpec, ...] = tuple(
            a for a in (typing.get_args(ret) if typing.get_origin(ret) is tuple else (ret,)) if isinstance(a, TensorSpec))
        self.optional = tuple(n for n, s in self.specs.items() if s.optional)
        self.primary = primary  # the axis the plan varies scalars and optionals along (None: its default)
        self.constraints = declared(self, constraints)  # checked at binding, repaired onto by the plan
        if batch != "...":
            from .dims import BATCH_DIMS

            if batch not in BATCH_DIMS or not any(s.variadic for s in self.specs.values()):
                raise ValueError(f"{self.name}: batch={batch!r} names what a leading '...' counts; use one of "
                                 f"{BATCH_DIMS} on an op with a '...' input")
        self.meta = metadata.parse(self.name, fn.__doc__, tags)
        self.implementations: dict[str, Implementation] = {}
        self._memo: dict = {}
        self._benched: dict = {}  # the memo of bench-mode calls whose case has its evidence
        self._graph_memo: dict = {}  # decisions for calls inside compiled graphs (ranked by device time)
        self.library = None  # torch.ops.popcorn.<name>, once enable_library() ran
        self.traced = None  # what a call inside torch.compile runs (library.traced_call)
        self.implementations[REFERENCE] = Implementation(self, REFERENCE, fn=fn)
        functools.update_wrapper(self, fn)
        params = list(self.signature.parameters.values()) + [
            inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None),
            inspect.Parameter("bench", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=bool | None),
        ]
        self.__signature__ = self.signature.replace(parameters=params)
        # the call path is generated from the signature (see hotpath): calling an Op is a key and a lookup
        self.__class__, self._key = hotpath.build(self)
        if compile:
            from .compiled import compiled  # the compile backend is part of every op

            self.register("compile", compiled(self))

    @functools.cached_property
    def ref_hash(self) -> str:
        """The reference's fingerprint (computed on first use, off the import path)."""
        return fingerprint(self.reference)

    # -- metadata -------------------------------------------------------------------------
    summary = property(lambda self: self.meta.summary)
    math = property(lambda self: self.meta.math)
    citations = property(lambda self: self.meta.citations)
    tags = property(lambda self: self.meta.tags)

    # -- registration ---------------------------------------------------------------------
    def register(self, name: str, fn: Callable | None = None, *, source: str | None = None,
                 gates: dict | None = None, predicate: Callable | None = None, forward_only: bool = False,
                 out_dtypes: dict | None = None, no_grad: tuple = ()):
        """Register implementation ``name``: ``op.register(name, adapter)``, ``op.register(name,
        source="pkg.mod:fn")`` or as a decorator ``@op.register(name, gates=...)``. Returns the adapter."""
        if fn is None and source is None:
            return lambda f: (self.register(name, f, gates=gates, predicate=predicate, forward_only=forward_only,
                                            out_dtypes=out_dtypes, no_grad=no_grad), f)[1]
        if name in self.implementations:
            raise ValueError(f"{self.name}: implementation '{name}' is already registered")
        self.implementations[name] = Implementation(self, name, fn=fn, source=source, gates=dict(gates or {}),
                                                    predicate=predicate, forward_only=forward_only,
                                                    out_dtypes=dict(out_dtypes or {}), no_grad=tuple(no_grad))
        self.forget()
        return fn

    def __getitem__(self, name: str) -> Implementation:
        try:
            return self.implementations[name]
        except KeyError:
            pass
        from .backends import BACKENDS

        registered = ", ".join(self.implementations)
        fam = BACKENDS.get(name.split(":", 1)[0])
        if fam is not None and fam.package is not None:
            # a known library without an adapter for this op: installing its extra would change nothing
            variants = [n for n in self.implementations if n.split(":", 1)[0] == fam.name]
            has = f"its adapters here are {', '.join(variants)}" if variants else \
                f"popcorn has no {fam.name} adapter for {self.name} (see `popcorn ops` for what {fam.name} covers)"
            raise DispatchError(f"{self.name} has no backend '{name}': {has}; registered: {registered}")
        raise DispatchError(f"{self.name} has no backend '{name}'; registered: {registered}")

    def available_backends(self) -> list[str]:
        """Registered backends whose package is installed in a supported version, in registration order."""
        return [n for n, impl in self.implementations.items() if impl.available]

    # -- calling --------------------------------------------------------------------------
    def arguments(self, args, kwargs) -> dict:
        """Bind a call to the reference signature, defaults applied."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise DispatchError(f"{self.name}{self.signature}: {e}") from None
        bound.apply_defaults()
        return bound.arguments

    def bind(self, arguments: dict) -> Binding:
        """Check the call against the annotations and bind its dims; raises DispatchError."""
        try:
            binding = bind(self.name, self.specs, arguments)
            check(self.name, self.constraints, binding.dims, binding.batch, arguments)
            return binding
        except DispatchError as e:
            if self.layout is None:
                raise
            raise type(e)(f"{e}; layout: {self.layout}") from None

    def case(self, arguments: dict, binding: Binding | None = None):
        """The Case this call represents, or None when its float tensors mix dtypes (no single case)."""
        from .case import Case

        binding = binding or self.bind(arguments)
        has_float = any(isinstance(arguments.get(n), torch.Tensor) and arguments[n].is_floating_point()
                        for n in self.specs)
        if has_float and binding.dtype is None:
            return None
        return Case(dict(binding.dims), tuple(binding.batch or ()),
                    str(binding.dtype or torch.float32).removeprefix("torch."),
                    {n: arguments[n] for n in self.scalars},
                    tuple(n for n in self.optional if arguments.get(n) is not None))

    def needs_grad(self, arguments: dict) -> bool:
        return torch.is_grad_enabled() and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in arguments.values())

    def _call(self, args: tuple, kwargs: dict, backend: str | None, bench: bool | None, graph: bool = False):
        """The slow path: bind, bench mode, a forced backend, or decide and memoize. ``graph``: the call runs
        inside a compiled graph (device time ranks there; host time per call does in eager code)."""
        arguments = self.arguments(args, kwargs)
        self.bind(arguments)
        benched = bench or (bench is None and bench_mode())
        if benched:
            _harness("ensure")(self, args, kwargs)
        grad = self.needs_grad(arguments)
        if backend is not None:
            impl = self[backend]
            impl.backend.require()  # a missing package says which extra to install
            reason = impl.rejects(arguments, grad)
            if reason:
                raise DispatchError(f"{self.name}: backend '{impl.name}' rejected the call: {reason}")
            return impl.invoke(arguments)
        impl = self.choose(arguments, grad, graph)
        try:
            key = self._key(*args, **kwargs)
            hash(key)
        except TypeError:
            return impl.invoke(arguments)
        if graph:
            self._graph_memo[key] = impl.specialized(arguments)
            return impl.invoke(arguments)
        self._memo[key] = impl.specialized(arguments)
        if benched:  # measured (or not measurable): later bench-mode calls of it cost a lookup
            self._benched[key] = self._memo[key]
        return impl.invoke(arguments)

    def choose(self, arguments: dict, grad: bool, graph: bool = False) -> Implementation:
        """The implementation this call runs: a scoped preference when it admits the call, else the
        dispatcher's choice from the evidence (the reference when no dispatcher is installed)."""
        preferred = PREFERENCE.get()
        if preferred:
            for name in preferred:
                impl = self.implementations.get(name)
                if impl is not None and impl.rejects(arguments, grad) is None:
                    return impl
        if Layers.dispatcher is not None:
            return Layers.dispatcher(self, arguments, grad, graph)
        return self.implementations[REFERENCE]

    def enable_library(self) -> None:
        """Register ``torch.ops.popcorn.<name>`` so compiled code calls the op opaquely."""
        if self.library is None and self.outputs:
            from .library import define, traced_call

            self.library = define(self)
            self.traced = traced_call(self)

    def forget(self) -> None:
        """Drop memoized decisions (new evidence arrived)."""
        self._memo.clear()
        self._benched.clear()
        self._graph_memo.clear()

    def validate(self, *args, trials: int | None = None, **kwargs) -> list:
        """Check every eligible non-reference backend on this exact call (no timing); Records, cached."""
        return _harness("benchmark")(self, args, kwargs, timing=False, **_trials(trials))

    def benchmark(self, *args, trials: int | None = None, **kwargs) -> list:
        """Validate, then time, every eligible non-reference backend on this exact call; Records, cached."""
        return _harness("benchmark")(self, args, kwargs, **_trials(trials))

    def __repr__(self) -> str:
        return f"<op {self.name}: {', '.join(self.implementations)}>"


def _trials(trials):
    return {} if trials is None else {"trials": trials}


def _harness(name: str) -> Callable:
    if Layers.harness is None:
        raise RuntimeError("the bench layer is not installed: import popcorn (popcorn/__init__ installs it)")
    return Layers.harness(name)


def register_kernel(fn: Callable | None = None, *, name: str | None = None, args: dict | None = None,
                    inputs: dict | None = None, tags=(), compile: bool = True, batch: str = "...",
                    workspace: Callable | None = None, fake: Callable | None = None, layout: str | None = None,
                    constraints=(), primary: str | None = None):
    """Turn a pure-PyTorch reference into an :class:`Op`.

    ``args`` gives scalar value pools for the case plan (the default always comes first);
    ``inputs`` maps a tensor parameter to ``fn(shape, case, generator) -> Tensor`` when random
    normal draws are not valid inputs (probabilities, indices, cu_seqlens); ``tags`` come from
    :data:`popcorn.core.metadata.TAGS`; ``batch="token_rows"`` says a leading ``...`` counts the
    batch x sequence rows of a row-wise op (planned to 64K tokens and past); ``workspace(case)``
    gives the elements of the largest intermediate the reference holds beyond its inputs
    (attention's scores), so the plan drops cases whose correctness run cannot fit. ``fake``
    computes the outputs' shapes and dtypes for torch.compile where the reference reads tensor
    values (varlen's sequence boundaries); it defaults to the reference. ``layout`` describes the
    expected tensor layout in words; shape errors end with it (attention's head-major layout).
    ``constraints`` (:mod:`popcorn.core.constraints`) are rules over dims and scalars that binding
    checks and the plan repairs onto; ``primary`` names the axis the plan's scalar and optional
    curves vary (default: the first temporal dim, else the first input's last dim).
    """
    def wrap(f):
        return Op(f, name=name, args=args, inputs=inputs, tags=tags, compile=compile, batch=batch,
                  workspace=workspace, fake=fake, layout=layout, constraints=constraints, primary=primary)
    return wrap(fn) if fn is not None else wrap
