"""One backend of one op (an Implementation) and its gates.

Gates are built with explicit constructors: ``absent()`` (an optional tensor must be None),
``dtypes(torch.float16, ...)`` (a tensor's dtype must be one of them) and ``one_of(...)`` (a scalar
must take one of the values). An empty gate would reject every call, so it is refused at
registration. The shorthand forms (None, a set of dtypes, a collection of values) still work and
are turned into the same objects.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from popcorn.schema import REFERENCE

from .backends import Backend, family
from .fingerprint import canonical, fingerprint
from .imports import imported

if TYPE_CHECKING:
    from .registry import Op


class Gate:
    """What a parameter must be for an implementation to take the call: ``kind`` is "absent",
    "dtype" or "values"; ``allowed`` the admitted dtypes or values."""

    __slots__ = ("kind", "allowed")

    def __init__(self, kind: str, allowed: frozenset = frozenset()):
        self.kind, self.allowed = kind, frozenset(allowed)

    def __eq__(self, other) -> bool:
        return isinstance(other, Gate) and (self.kind, self.allowed) == (other.kind, other.allowed)

    def __hash__(self) -> int:
        return hash((self.kind, self.allowed))

    def __repr__(self) -> str:
        return f"Gate({self.kind!r}, {set(self.allowed) or ''})"

    def canonical(self) -> str:
        return f"{self.kind}:{canonical(self.allowed)}"


def absent() -> Gate:
    """The optional tensor must be None (the backend has no such input)."""
    return Gate("absent")


def dtypes(*allowed: torch.dtype) -> Gate:
    """The tensor's dtype must be one of ``allowed``."""
    if not allowed or not all(isinstance(d, torch.dtype) for d in allowed):
        raise ValueError(f"dtypes(...) takes one or more torch dtypes, got {allowed!r}")
    return Gate("dtype", frozenset(allowed))


def one_of(*allowed) -> Gate:
    """The scalar argument must equal one of ``allowed``."""
    if not allowed:
        raise ValueError("one_of(...) needs at least one admitted value (an empty gate rejects every call)")
    return Gate("values", frozenset(allowed))


def as_gate(where: str, value) -> Gate:
    """A Gate from an explicit constructor or the shorthand (None, a set of dtypes, a collection of values)."""
    if isinstance(value, Gate):
        return value
    if value is None:
        return absent()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{where}: a gate is absent(), dtypes(...) or one_of(...), got {value!r}")
    values = tuple(value)
    if not values:
        raise ValueError(f"{where}: an empty gate rejects every call; use absent(), dtypes(...) or one_of(...)")
    return dtypes(*values) if all(isinstance(v, torch.dtype) for v in values) else one_of(*values)


_IMPL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*(:[a-z0-9][a-z0-9_-]*)?$")


@dataclass
class Implementation:
    """One backend of one op: a callable with its family, gates, predicate and grad support.

    ``gates`` maps a parameter to a :class:`Gate` (``absent()``, ``dtypes(...)``, ``one_of(...)``, or
    their shorthand: None, a set of torch dtypes, a collection of admitted scalar values).
    ``out_dtypes`` declares outputs whose dtype differs from the reference's: output index -> a
    torch dtype or the name of the tensor parameter whose dtype it takes (Liger's jsd returns its
    loss in the input dtype where the reference returns fp32). Correctness holds every other
    output to the reference's dtype.
    """

    op: Op
    name: str
    fn: Callable | None = None  # an adapter called with the reference's parameters by keyword
    source: str | None = None  # "module:attr", imported on first use, called positionally
    gates: dict[str, Gate] = field(default_factory=dict)
    predicate: Callable[..., bool] | None = None
    forward_only: bool = False
    out_dtypes: dict[int, Any] = field(default_factory=dict)
    # tensor inputs the backend gives no gradient to (liger's rope: cos and sin); calls where they
    # require grad go elsewhere, and correctness is judged on the other gradients
    no_grad: tuple[str, ...] = ()

    def __post_init__(self):
        if not _IMPL_NAME.match(self.name):
            raise ValueError(f"bad implementation name {self.name!r}: use 'backend' or 'backend:variant' in [a-z0-9_-]")
        if (self.fn is None) == (self.source is None):
            raise ValueError(f"{self.op.name}['{self.name}']: give exactly one of an adapter function or source=")
        self.backend: Backend = family(self.name)
        params = list(self.op.signature.parameters)
        for gate in self.gates:
            if gate not in params:
                raise ValueError(f"{self.op.name}['{self.name}']: gate on unknown parameter '{gate}' (have {params})")
        self.gates = {k: as_gate(f"{self.op.name}['{self.name}'] gate on '{k}'", v) for k, v in self.gates.items()}
        self.no_grad = tuple(self.no_grad)
        if set(self.no_grad) - set(self.op.specs):
            raise ValueError(f"{self.op.name}['{self.name}']: no_grad names tensor parameters "
                             f"({list(self.op.specs)}), got {list(self.no_grad)}")
        for index, dtype in self.out_dtypes.items():
            if not isinstance(index, int) or not (isinstance(dtype, torch.dtype) or dtype in self.op.specs):
                raise ValueError(f"{self.op.name}['{self.name}']: out_dtypes maps an output index to a torch dtype "
                                 f"or a tensor parameter ({list(self.op.specs)}), got {index!r}: {dtype!r}")
        if self.fn is not None and self.name != REFERENCE:
            got = list(inspect.signature(self.fn).parameters)
            if got != params:
                raise ValueError(f"{self.op.name}['{self.name}']: adapter parameters {got} must be the reference's {params}")

    @functools.cached_property
    def impl_hash(self) -> str:
        """The fingerprint of everything this implementation runs and declares (computed on first use:
        a ``source=`` kernel is imported for it)."""
        fn = self._resolved
        gates = {k: g.canonical() for k, g in self.gates.items()}
        declared = (f"gates={canonical(gates)};forward_only={self.forward_only};"
                    f"out_dtypes={canonical(self.out_dtypes)};recipe={canonical(getattr(fn, 'recipe', None))}"
                    + (f";no_grad={canonical(self.no_grad)}" if self.no_grad else ""))
        return fingerprint(fn, self.predicate, declared=declared)

    @functools.cached_property
    def _resolved(self) -> Callable:
        if self.fn is not None:
            return self.fn
        return imported(self.source)

    @property
    def available(self) -> bool:
        return self.backend.available

    def rejects(self, arguments: dict, grad: bool) -> str | None:
        """Why this implementation cannot serve the call, or None when it can."""
        problem = self.backend.problem()
        if problem:
            return problem
        if self.forward_only and grad:
            return "no backward implementation (forward_only); call under torch.no_grad() or pick another backend"
        needing = [n for n in self.no_grad if grad and getattr(arguments.get(n), "requires_grad", False)]
        if needing:
            return (f"gives no gradient to {', '.join(needing)}; pass them detached (buffers usually are) "
                    "or pick another backend")
        for name, gate in self.gates.items():
            value = arguments.get(name)
            if gate.kind == "absent" and value is not None:
                return f"'{name}' must be None"
            if gate.kind == "dtype" and isinstance(value, torch.Tensor) and value.dtype not in gate.allowed:
                allowed = ", ".join(sorted(str(d).removeprefix("torch.") for d in gate.allowed))
                return f"'{name}' dtype {str(value.dtype).removeprefix('torch.')} is not one of {allowed}"
            if gate.kind == "values" and value not in gate.allowed:
                return f"'{name}'={value!r} is not one of {sorted(gate.allowed, key=repr)}"
        if self.predicate is not None and not self.predicate(**arguments):
            return f"predicate {getattr(self.predicate, '__name__', 'predicate')} declined the call"
        return None

    def admits_static(self, dtype: str, args: dict, present) -> bool:
        """Whether the static gates admit a case of this dtype, scalar args and present optionals
        (what the plan and the audit can know before any tensor exists; predicates need tensors)."""
        for name, gate in self.gates.items():
            kind = gate.kind
            if kind == "absent":
                if name in present:
                    return False
            elif kind == "dtype":
                spec = self.op.specs.get(name)
                if spec is None or (spec.optional and name not in present):
                    continue
                names = {str(d).removeprefix("torch.") for d in spec.dtypes}
                # inputs are cast to the spec's first admitted dtype when the case dtype is not admitted
                actual = dtype if dtype in names else str(sorted(spec.dtypes, key=str)[0]).removeprefix("torch.")
                if actual not in {str(d).removeprefix("torch.") for d in gate.allowed}:
                    return False
            elif name in args and args[name] not in gate.allowed:
                return False
        return True

    def expected_dtypes(self, arguments: dict) -> dict[int, torch.dtype]:
        """The declared output dtypes for a call with ``arguments`` (output index -> dtype)."""
        return {i: d if isinstance(d, torch.dtype) else arguments[d].dtype for i, d in self.out_dtypes.items()}

    def invoke(self, arguments: dict):
        fn = self._resolved
        if self.fn is not None:
            return fn(**arguments)
        return fn(*arguments.values())

    def specialized(self, arguments: dict) -> Callable:
        """What a memoized call runs: a callable taking the op's parameters positionally (keyword-only
        ones by name), for calls with this signature."""
        fn = self._resolved
        special = getattr(fn, "specialize", None)
        if special is not None:
            return special(arguments)
        if self.fn is not None or not any(p.kind is p.KEYWORD_ONLY for p in self.op.signature.parameters.values()):
            return fn  # adapters take the reference's parameters; sources take them all positionally
        return lambda *a, **k: self.invoke(self.op.arguments(a, k))

    def __call__(self, *args, **kwargs):
        return self.op(*args, backend=self.name, **kwargs)

    def __repr__(self) -> str:
        notes = []
        if self.forward_only:
            notes.append("fwd-only")
        if self.gates:
            notes.append("gates=" + ",".join(self.gates))
        if self.predicate is not None:
            notes.append("predicate")
        return f"{self.op.name}['{self.name}']" + (f" ({'; '.join(notes)})" if notes else "")
