"""Shape grammar: tensor annotations that bind dim names to sizes across a call.

An annotation is written ``Float["... normalized_shape"]``: a dtype class (``Float``,
``Half``, ``F32``, ``Int``, ``Bool``) indexed by a space-separated dim string. Tokens are
dim names, int literals, one leading ``...`` (the variadic batch) and derived tokens
``base+k``, ``base-k``, ``base*k``, ``base/k`` where ``k`` is an int or a scalar parameter.
``X | None`` marks an optional tensor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from .errors import DispatchError

FLOAT = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
HALF = frozenset({torch.float16, torch.bfloat16})
FP32 = frozenset({torch.float32, torch.float64})  # fp64 stays admitted: it is the truth run
INT = frozenset({torch.int32, torch.int64})
BOOL = frozenset({torch.bool})

_DERIVED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)([+\-*/])([A-Za-z_][A-Za-z0-9_]*|\d+)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Token:
    """One position of an annotation: a name, a literal, the variadic batch or a derivation."""

    text: str
    kind: str  # "name" | "literal" | "batch" | "derived"
    base: str | None = None
    op: str | None = None
    k: str | int | None = None

    @classmethod
    def parse(cls, text: str) -> Token:
        if text == "...":
            return cls(text, "batch")
        if text.isdigit():
            return cls(text, "literal", k=int(text))
        if _NAME.match(text):
            return cls(text, "name", base=text)
        m = _DERIVED.match(text)
        if m:
            base, op, k = m.groups()
            return cls(text, "derived", base=base, op=op, k=int(k) if k.isdigit() else k)
        raise ValueError(f"bad shape token {text!r}: use a name, an int, '...', or name(+|-|*|/)k")

    def derive(self, base: int, k: int) -> int:
        return {"+": base + k, "-": base - k, "*": base * k, "/": base // k}[self.op]

    def invert(self, size: int, k: int) -> int | None:
        """The base size that derives ``size``, or None when none does."""
        if self.op == "+":
            return size - k
        if self.op == "-":
            return size + k
        if self.op == "*":
            return size // k if size % k == 0 else None
        return size * k  # "/": the smallest base; floor division makes it ambiguous otherwise


@dataclass(frozen=True)
class TensorSpec:
    """The annotation of one tensor parameter or output."""

    dims: str
    dtypes: frozenset
    kind: str
    optional: bool = False
    tokens: tuple[Token, ...] = field(default=(), compare=False)

    def __post_init__(self):
        tokens = tuple(Token.parse(t) for t in self.dims.split())
        if any(t.kind == "batch" for t in tokens[1:]):
            raise ValueError(f"'...' must lead the annotation, got {self.dims!r}")
        object.__setattr__(self, "tokens", tokens)

    @property
    def variadic(self) -> bool:
        return bool(self.tokens) and self.tokens[0].kind == "batch"

    @property
    def names(self) -> tuple[str, ...]:
        """Dim names this annotation mentions, bases of derived tokens included."""
        return tuple(t.base for t in self.tokens if t.base)

    @property
    def is_float(self) -> bool:
        return bool(self.dtypes & FLOAT)

    def __or__(self, other):
        if other is None:
            return TensorSpec(self.dims, self.dtypes, self.kind, optional=True)
        return NotImplemented

    def __ror__(self, other):
        return self.__or__(other)

    def __repr__(self) -> str:
        return f'{self.kind}["{self.dims}"]' + (" | None" if self.optional else "")


class _DtypeClass:
    def __init__(self, kind: str, dtypes: frozenset):
        self.kind, self.dtypes = kind, dtypes

    def __getitem__(self, dims: str) -> TensorSpec:
        return TensorSpec(dims, self.dtypes, self.kind)

    def __repr__(self) -> str:
        return self.kind


Float = _DtypeClass("Float", FLOAT)
Half = _DtypeClass("Half", HALF)
F32 = _DtypeClass("F32", FP32)
Int = _DtypeClass("Int", INT)
Bool = _DtypeClass("Bool", BOOL)


@dataclass
class Binding:
    """Sizes bound by one call: named dims, the variadic batch and the one float dtype (None if mixed)."""

    dims: dict[str, int]
    batch: tuple[int, ...] | None
    dtype: torch.dtype | None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def bind(op: str, specs: dict[str, TensorSpec], arguments: dict, scalars: dict | None = None) -> Binding:
    """Bind every dim of ``specs`` from the tensors in ``arguments``; raise DispatchError on conflict.

    Plain names bind first, derived tokens second, so ``cos: "seq head_dim/2"`` may precede the
    tensor that binds ``head_dim``.
    """
    dims: dict[str, int] = {}
    owner: dict[str, str] = {}
    batch: tuple[int, ...] | None = None
    batch_owner = None
    float_dtypes: dict[torch.dtype, str] = {}
    derived: list[tuple[str, Token, int]] = []
    scalars = scalars if scalars is not None else arguments

    for name, spec in specs.items():
        value = arguments.get(name)
        if value is None:
            if spec.optional:
                continue
            raise DispatchError(f"{op}: argument '{name}' is required ({spec!r}), got None")
        if not isinstance(value, torch.Tensor):
            raise DispatchError(f"{op}: argument '{name}' must be a tensor {spec!r}, got {type(value).__name__}")
        if value.dtype not in spec.dtypes:
            allowed = ", ".join(sorted(_dtype_name(d) for d in spec.dtypes))
            raise DispatchError(
                f"{op}: argument '{name}' has dtype {_dtype_name(value.dtype)}, but {spec!r} admits {allowed}"
            )
        if value.dtype in FLOAT:
            float_dtypes.setdefault(value.dtype, name)
        shape = tuple(value.shape)
        tokens = spec.tokens
        if spec.variadic:
            fixed = tokens[1:]
            if len(shape) < len(fixed):
                raise DispatchError(
                    f"{op}: argument '{name}' has shape {list(shape)}, but {spec!r} needs at least {len(fixed)} dims"
                )
            lead = shape[: len(shape) - len(fixed)]
            if batch is None:
                batch, batch_owner = lead, name
            elif lead != batch:
                raise DispatchError(
                    f"{op}: argument '{name}' has batch dims '...'={list(lead)}, "
                    f"but '{batch_owner}' bound '...'={list(batch)}"
                )
            shape, tokens = shape[len(lead):], fixed
        elif len(shape) != len(tokens):
            raise DispatchError(
                f"{op}: argument '{name}' has shape {list(shape)} ({len(shape)} dims), but {spec!r} needs {len(tokens)}"
            )
        for token, size in zip(tokens, shape):
            if token.kind == "literal":
                if size != token.k:
                    raise DispatchError(f"{op}: argument '{name}' dim {token.k} is fixed, got size {size}")
            elif token.kind == "derived":
                derived.append((name, token, size))
            elif token.text in dims and dims[token.text] != size:
                raise DispatchError(
                    f"{op}: argument '{name}' dim '{token.text}' is {size}, "
                    f"but '{owner[token.text]}' bound '{token.text}' to {dims[token.text]}"
                )
            else:
                dims.setdefault(token.text, size)
                owner.setdefault(token.text, name)

    # Bind derived tokens whose base nothing else binds first, so checks see every base.
    for name, token, size in sorted(derived, key=lambda d: d[1].base in dims):
        k = token.k if isinstance(token.k, int) else scalars.get(token.k)
        if not isinstance(k, int):
            raise DispatchError(f"{op}: dim '{token.text}' of '{name}' needs an int '{token.k}', got {k!r}")
        if token.base in dims:
            want = token.derive(dims[token.base], k)
            if want != size:
                raise DispatchError(
                    f"{op}: argument '{name}' dim '{token.text}' is {size}, but '{owner[token.base]}' bound "
                    f"'{token.base}' to {dims[token.base]}, so '{token.text}' must be {want}"
                )
        else:
            base = token.invert(size, k)
            if base is None or base < 0:
                raise DispatchError(f"{op}: argument '{name}' dim '{token.text}' is {size}, which no '{token.base}' derives")
            dims[token.base], owner[token.base] = base, name

    # Mixed float dtypes (fp32 weights beside bf16 activations) are legal calls with no case dtype.
    dtype = next(iter(float_dtypes)) if len(float_dtypes) == 1 else None
    return Binding(dims, batch, dtype)
