"""Constraints an op declares on its dims and scalars, so the op (not the planner) owns its rules.

``register_kernel(constraints=[divides("kv_heads", "q_heads"), even("head_dim")])``: binding checks
each constraint on every new call signature and raises :class:`ConstraintError` naming the values
and the nearest valid one; the case plan repairs independently drawn values onto them. A
constraint reads named values: a dim the call binds (``head_dim``) or an int scalar argument
(``num_groups``); it applies only when every value it reads is present (a dim only an absent
optional tensor names, a scalar left None). The constructors are generic (``multiple_of("seq", 64)``,
``at_most("head_dim", 256)``) so a backend's limits can be written the same way.

Repair moves only the constraint's first name (``kv_heads`` in ``divides("kv_heads", "q_heads")``)
and leaves a valid case unchanged; :func:`repaired` runs the constraints to a fixed point, so it is
idempotent.
"""

from __future__ import annotations

from .errors import DispatchError
from .shapes import Token


class ConstraintError(DispatchError, ValueError):
    """A call whose dims bind but break a rule the op declares. A ValueError too: the value is wrong
    (the references raised ValueError for these rules before the op declared them)."""


class Values:
    """What constraints read and repair: the bound dims, the leading ``...`` and the scalar arguments."""

    def __init__(self, dims: dict, batch: tuple | None, args: dict):
        self.dims, self.batch, self.args = dims, batch, args
        self.moved = 0  # repairs made; repaired() stops when a pass makes none

    def get(self, name: str) -> int | None:
        """The int ``name`` holds (a dim, else a scalar), or None when absent or not an int."""
        value = self.dims[name] if name in self.dims else self.args.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def set(self, name: str, value: int) -> None:
        (self.dims if name in self.dims else self.args)[name] = value
        self.moved += 1

    def set_batch(self, batch: tuple) -> None:
        self.batch = batch
        self.moved += 1


def _largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is <= ``cap`` (and >= 1)."""
    for d in range(max(1, min(n, cap)), 0, -1):
        if n % d == 0:
            return d
    return 1


class Constraint:
    """One rule over named values. ``why`` is appended to the error; ``plan_only`` rules shape the
    plan but calls may break them (legal calls the plan gains nothing from measuring). ``params``
    names a subclass's own parameters, defaulted by its class attributes. (Plain classes, not
    dataclasses: generating dataclass methods costs import time on every ``import popcorn``.)"""

    params: tuple[str, ...] = ()

    def __init__(self, name: str, why: str = "", plan_only: bool = False, **params):
        self.name = name  # the value repair moves
        self.why, self.plan_only = why, plan_only
        unknown = set(params) - set(self.params)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown parameters {sorted(unknown)}")
        for k in self.params:
            setattr(self, k, params.get(k, getattr(type(self), k)))

    def _key(self) -> tuple:
        return (type(self), self.name, self.why, self.plan_only) + tuple(getattr(self, k) for k in self.params)

    def __eq__(self, other) -> bool:
        return isinstance(other, Constraint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        params = "".join(f", {k}={getattr(self, k)!r}" for k in self.params)
        return f"{type(self).__name__}({self.name!r}{params}" + (", plan_only=True" if self.plan_only else "") + ")"

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.name,)

    def _note(self) -> str:
        return f" ({self.why})" if self.why else ""

    def violation(self, v: Values) -> str | None:
        """Why ``v`` breaks this rule and how to fix it, or None (also when it does not apply)."""
        raise NotImplementedError

    def repair(self, v: Values) -> None:
        """Move ``name`` (or the batch) to the nearest valid value, in place; a valid ``v`` is kept."""
        raise NotImplementedError


class Divides(Constraint):
    params = ("whole",)
    whole = ""

    @property
    def reads(self):
        return (self.name, self.whole)

    def violation(self, v):
        part, whole = v.get(self.name), v.get(self.whole)
        if part is None or whole is None or (part > 0 and whole % part == 0):
            return None
        return (f"{self.whole}={whole} is not divisible by {self.name}={part}: {self.name} must divide "
                f"{self.whole}{self._note()}; the nearest valid {self.name} is {_largest_divisor(whole, part)}")

    def repair(self, v):
        if self.violation(v):
            v.set(self.name, _largest_divisor(v.get(self.whole), v.get(self.name)))


class MultipleOf(Constraint):
    params = ("k",)
    k = 1

    def violation(self, v):
        x = v.get(self.name)
        if x is None or x % self.k == 0:
            return None
        down = x - x % self.k
        word = "even" if self.k == 2 else f"a multiple of {self.k}"
        near = f"{down} or {down + self.k}" if down else f"{down + self.k}"
        return f"{self.name}={x} must be {word}{self._note()}; use {near}"

    def repair(self, v):
        if self.violation(v):  # down to the multiple below, at least k itself
            x = v.get(self.name)
            v.set(self.name, max(self.k, x - x % self.k))


class Bound(Constraint):
    """``name <= limit`` (``upper``) or ``name >= limit``; ``limit`` is an int or a shape token over
    another value, such as ``"total+1"`` or ``"head_dim/2"`` (the annotation grammar)."""

    params = ("limit", "upper")
    limit = "0"
    upper = True

    @property
    def _token(self) -> Token:
        return Token.parse(self.limit)

    @property
    def reads(self):
        t = self._token
        return (self.name,) + ((t.base,) if t.base else ()) + ((t.k,) if isinstance(t.k, str) else ())

    def _limit(self, v: Values) -> int | None:
        t = self._token
        if t.kind == "literal":
            return t.k
        if t.kind == "name":
            return v.get(t.base)
        base, k = v.get(t.base), t.k if isinstance(t.k, int) else v.get(t.k)
        return None if base is None or k is None else t.derive(base, k)

    def violation(self, v):
        x, limit = v.get(self.name), self._limit(v)
        if x is None or limit is None or (x <= limit if self.upper else x >= limit):
            return None
        shown = str(limit) if self._token.kind == "literal" else f"{self.limit}={limit}"
        return (f"{self.name}={x} must be at {'most' if self.upper else 'least'} {shown}{self._note()}; "
                f"use {limit}")

    def repair(self, v):
        if self.violation(v):
            v.set(self.name, self._limit(v))


class BatchBroadcasts(Constraint):
    """The leading ``...`` of ``of`` broadcasts against the dim ``name``: none, 1 or ``(name,)``."""

    params = ("of",)
    of = "the '...' tensors"

    def violation(self, v):
        n, batch = v.get(self.name), tuple(v.batch or ())
        if n is None or batch in ((), (1,), (n,)):
            return None
        return (f"{self.of} leading dims {list(batch)} must be none (shared by the whole {self.name}), 1, "
                f"or the {self.name} ({n}){self._note()}")

    def repair(self, v):
        if self.violation(v):
            v.set_batch((1,))


# -- constructors ------------------------------------------------------------------------------------

def divides(part: str, whole: str, *, why: str = "", plan_only: bool = False) -> Constraint:
    """``part`` divides ``whole`` (kv_heads divides q_heads; a scalar num_groups divides channels);
    repair: the largest divisor of ``whole`` <= ``part``."""
    return Divides(part, why, plan_only, whole=whole)


def multiple_of(name: str, k: int, *, why: str = "", plan_only: bool = False) -> Constraint:
    """``name`` is a multiple of ``k`` (a chunk size); repair: round down, at least ``k``."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"multiple_of({name!r}, {k!r}): k must be a positive int")
    return MultipleOf(name, why, plan_only, k=k)


def even(name: str, *, why: str = "", plan_only: bool = False) -> Constraint:
    """``name`` is even (a kernel halves it); repair: round down, at least 2."""
    return multiple_of(name, 2, why=why, plan_only=plan_only)


def at_most(name: str, limit: int | str, *, why: str = "", plan_only: bool = False) -> Constraint:
    """``name <= limit``: an int, or a token over another value (``"total+1"``); repair: the limit."""
    Token.parse(str(limit))  # a bad limit fails at registration
    return Bound(name, why, plan_only, limit=str(limit), upper=True)


def at_least(name: str, limit: int | str, *, why: str = "", plan_only: bool = False) -> Constraint:
    """``name >= limit``: an int, or a token over another value; repair: the limit."""
    Token.parse(str(limit))
    return Bound(name, why, plan_only, limit=str(limit), upper=False)


def batch_broadcasts(name: str, *, of: str = "the '...' tensors", why: str = "",
                     plan_only: bool = False) -> Constraint:
    """The leading ``...`` is none, 1 or ``(name,)`` (rope's cos/sin against the q/k batch); repair: 1."""
    return BatchBroadcasts(name, why, plan_only, of=of)


# -- what binding and the plan call --------------------------------------------------------------------

def declared(op, constraints) -> tuple[Constraint, ...]:
    """``constraints`` as a tuple, each checked to read only dims and scalars of ``op``; ``op.primary``,
    when set, checked to name one of its axes (at registration, where the author sees the error)."""
    out = tuple(constraints or ())
    dims = {n for spec in op.specs.values() for n in spec.names}
    axes = dims | ({"..."} if any(s.variadic for s in op.specs.values()) else set())
    if op.primary is not None and op.primary not in axes:
        raise ValueError(f"{op.name}: primary={op.primary!r} is not an axis of the op; axes: {sorted(axes)}")
    known = dims | set(op.scalars)
    for c in out:
        if not isinstance(c, Constraint):
            raise ValueError(f"{op.name}: constraints take popcorn.core.constraints objects "
                             f"(divides, multiple_of, ...), got {c!r}")
        unknown = [n for n in c.reads if n not in known]
        if unknown:
            raise ValueError(f"{op.name}: constraint on unknown dims or scalars {unknown}; known: {sorted(known)}")
        if isinstance(c, BatchBroadcasts) and not any(s.variadic for s in op.specs.values()):
            raise ValueError(f"{op.name}: batch_broadcasts needs an input with a leading '...'")
    return out


def violation(constraints, dims: dict, batch, args: dict) -> str | None:
    """What the first constraint a call breaks says, or None (``plan_only`` ones are skipped). Usable
    wherever dims are known: binding, and later a backend's own limits as a gate."""
    v = Values(dims, batch, args)
    for c in constraints:
        problem = None if c.plan_only else c.violation(v)
        if problem:
            return problem
    return None


def check(op: str, constraints, dims: dict, batch, args: dict) -> None:
    """Raise ConstraintError for the first constraint a call breaks."""
    problem = violation(constraints, dims, batch, args)
    if problem:
        raise ConstraintError(f"{op}: {problem}")


def repaired(constraints, dims: dict, batch, args: dict) -> tuple[dict, tuple, dict]:
    """(dims, batch, args) moved onto every constraint, repeated until nothing moves (idempotent)."""
    v = Values(dict(dims), batch, dict(args))
    for _ in range(16):
        moved = v.moved
        for c in constraints:
            c.repair(v)
        if v.moved == moved:
            return v.dims, v.batch, v.args
    raise ValueError(f"constraints {list(constraints)} do not settle on {dims} {batch} {args}: they contradict")
