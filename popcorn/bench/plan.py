"""The case plan: which cases ``bench fill`` (and the sweep and the explorer) measure for an op.

``case_plan(op, device_bytes)`` is one deterministic function of the op's annotations, scalar
pools and optional tensors, the dims vocabulary (:mod:`popcorn.core.dims`) and the device's
memory. It never touches a device. Three profiles make up a plan:

* ``coverage``: a strength-2 covering array (a deterministic IPOG greedy build) over every dim
  pool, the dtypes, each scalar pool and a presence axis per optional tensor, plus the all-first
  and all-last rows. Every value and every pair of values of two axes appears (before repair,
  which may merge rows).
* ``production``: one-axis curves through each dim's pool with every other dim pinned to its
  production anchor (temporal axes capped at 32K, token rows at 64K); the primary axis also gets
  one curve per non-default scalar value and per optional tensor. A row-wise op's leading ``...``
  counts token rows (``register_kernel(batch="token_rows")``), so its curves run at 4096 rows and
  its rows curve through 64K at production widths, as training calls it.
* ``long``: the same over temporal axes only, from 8K to 1M, the other dims pinned to the small
  long-context anchors.

Every case is repaired onto valid cross-axis relations (:func:`repair`); curve and slice points
whose repair would change a pinned value are dropped rather than altered, so a curve's context is
exactly its metadata. fp16 cases whose backward reduces 32K or more positions into one input are
planned forward-only, and cases whose correctness copies (native, fp64 truth, gradients and the
reference's declared workspace) cannot fit the device are dropped.
Cases run smallest-first within each stratum so an OOM/timeout :class:`Frontier` meets its
boundary before paying for anything beyond it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
from dataclasses import dataclass, field, replace

from popcorn.core.case import Case
from popcorn.core.dims import Dim, dim
from popcorn.core.inputs import shape_of

BATCH = "..."  # the leading variadic extent, an axis of its own: 0 -> batch=(), n -> batch=(n,)
DTYPES = ("float32", "bfloat16", "float16")
PROFILES = ("coverage", "production", "long")
TEMPORAL_CAP = 32768  # production curves and slices stop here ("full-model temporal curves to 32K")
LONG_MIN = 8192  # long-context curves start here and run through the pool (to 1M)
FANIN_LIMIT = 32768  # fp16: a gradient reduced over this many positions is planned forward-only
HEADROOM = 0.9  # fraction of device memory the correctness copies may use
PRIMARY = ("seq", "tokens", "total", "hidden", "normalized_shape", "head_dim", "channels", "vocab",
           "intermediate", BATCH)
_ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
_INT_BYTES = 8


# -- public records ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Planned:
    """One planned measurement: a repaired case, its gradient mode, stratum and series."""

    case: Case
    grad: bool
    stratum: str  # f"{profile}-{dtype}-{'grad' if grad else 'fwd'}"
    series: str  # "coverage" or the name of the first curve that planned the case


@dataclass(frozen=True)
class Curve:
    """A one-axis series: ``axis`` varies over ``case_ids`` (ascending), everything else is fixed.

    ``fixed_dims`` holds every other dim, ``batch`` the fixed variadic batch (``()`` on the
    ``...`` axis, where the batch is what varies), ``args`` every scalar, ``present`` the optional
    tensors passed. ``variant`` is ``base``, ``arg-<name>-<value>`` or ``present-<name>``.
    """

    name: str
    profile: str
    axis: str
    dtype: str
    variant: str
    fixed_dims: dict
    batch: tuple
    args: dict
    present: tuple
    case_ids: tuple[str, ...]


@dataclass
class Plan:
    op: str
    cases: list[Planned] = field(default_factory=list)
    curves: list[Curve] = field(default_factory=list)
    dropped: int = 0  # distinct cases dropped because their correctness copies cannot fit


# -- axes and pools ------------------------------------------------------------------------------

def dim_axes(op) -> list[str]:
    """Dim axes in order of first appearance in the input annotations; ``...`` where it leads."""
    axes: list[str] = []
    for spec in op.specs.values():
        for token in spec.tokens:
            name = BATCH if token.kind == "batch" else token.base
            if name and name not in axes:
                axes.append(name)
    return axes


def dtypes_of(op) -> tuple[str, ...]:
    return DTYPES if any(s.is_float for s in op.specs.values()) else ("float32",)


def primary_axis(op) -> str:
    axes = dim_axes(op)
    return next((a for a in PRIMARY if a in axes), axes[0] if axes else BATCH)


def axis_dim(op, axis: str) -> Dim:
    """The vocabulary entry of an axis; the leading ``...`` takes the one the op names (``op.batch``)."""
    return dim(op.batch) if axis == BATCH else dim(axis)


def _pool(op, axis: str) -> tuple:
    return tuple(axis_dim(op, axis).pool)


def _temporal(op, axis: str) -> bool:
    return axis_dim(op, axis).temporal


def _anchor(op, axis: str, profile: str) -> int:
    d = axis_dim(op, axis)
    return d.long_anchor if profile == "long" and d.long_anchor is not None else d.anchor


def _batch(n: int | tuple | list) -> tuple[int, ...]:
    """``...`` values: 0 -> (), n -> (n,); a list or tuple is the batch itself."""
    if isinstance(n, (list, tuple)):
        return tuple(int(v) for v in n)
    return () if int(n) == 0 else (int(n),)


def coverage_axes(op) -> list[tuple[str, tuple]]:
    """The covering array's axes: dims (``...`` included), ``dtype``, scalars, ``+optional`` presence."""
    axes = [(a, tuple(axis_dim(op, a).coverage or axis_dim(op, a).pool)) for a in dim_axes(op)]
    axes.append(("dtype", dtypes_of(op)))
    axes += [(name, tuple(pool)) for name, pool in op.arg_pools.items()]
    axes += [(f"+{name}", (False, True)) for name in op.optional]
    return axes


# -- covering array ------------------------------------------------------------------------------

_FREE = -1  # a position no pair needs yet ("don't care"); whatever is left free ends as 0


def covering_rows(sizes) -> list[tuple[int, ...]]:
    """Index rows covering every value pair of every two axes: all-first, the IPOG array, all-last.

    A deterministic in-parameter-order (IPOG) greedy build: no randomness, no hashing, and no
    decision depends on set iteration order. Memoized by ``sizes``: many ops share a signature.
    """
    return list(_covering(tuple(int(s) for s in sizes)))


@functools.lru_cache(maxsize=256)
def _covering(sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    if not sizes:
        return ((),)
    if len(sizes) == 1:
        return ((0,),) + tuple((v,) for v in range(sizes[0])) + ((sizes[0] - 1,),)
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))  # largest first, ties by position
    out = []
    for row in _ipog([sizes[i] for i in order]):
        full = [0] * len(sizes)
        for pos, i in enumerate(order):
            full[i] = row[pos]
        out.append(tuple(full))
    return tuple(out)


def _ipog(sizes: list[int]) -> list[tuple[int, ...]]:
    """A strength-2 covering array over ``sizes`` (largest first, at least two axes).

    The all-first and all-last rows are fixed bookends (first and last in the result) and count
    toward coverage. The rest starts as the product of the two largest axes (less the two pairs the
    bookends already hold). Each further axis then grows horizontally: every row takes the value
    covering the most still-uncovered pairs (ties cyclically after the last value chosen), or stays
    free there when no value covers any. Then vertically: each pair still uncovered, in axis/value
    order, goes into a row free where it needs to be (one already holding a side of the pair
    first, then the earliest), else into a new row free everywhere else. Positions still free at
    the end become 0. Uncovered pairs are kept as per-(axis, value) bitmasks over the new axis'
    values, so nothing depends on hashing or set order.
    """
    n = len(sizes)
    first, last = [0] * n, [s - 1 for s in sizes]
    rows = [[a, b] + [_FREE] * (n - 2) for a in range(sizes[0]) for b in range(sizes[1])
            if [a, b] != first[:2] and [a, b] != last[:2]]
    for p in range(2, n):
        s = sizes[p]
        full = (1 << s) - 1
        unc = [[full] * sizes[q] for q in range(p)]  # unc[q][x]: bit v set while (q=x, p=v) is uncovered
        left = s * sum(sizes[:p])

        def cover(r):  # mark every pair of r that involves axis p as covered
            nonlocal left
            v, got = r[p], 0
            if v == _FREE:
                return
            bit = 1 << v
            for q in range(p):
                x = r[q]
                if x != _FREE and unc[q][x] & bit:
                    unc[q][x] &= ~bit
                    got += 1
            left -= got

        cover(first)
        cover(last)
        # horizontal growth; ties go to the first value at or after the one last chosen, cyclically,
        # which spreads values like (a + b) mod s and makes the product seed cover the axis outright
        nxt = 0
        for r in rows:
            if not left:
                break
            gain = [0] * s
            for q in range(p):
                x = r[q]
                if x == _FREE:
                    continue
                m = unc[q][x]
                while m:
                    low = m & -m
                    gain[low.bit_length() - 1] += 1
                    m ^= low
            best = max(gain)
            if best:
                r[p] = next(v for v in (*range(nxt, s), *range(nxt)) if gain[v] == best)
                nxt = (r[p] + 1) % s
                cover(r)
        # vertical growth: only rows with a free position can take a pair; new rows are free elsewhere
        loose = [r for r in rows if _FREE in r[:p + 1]]
        for q in range(p):
            for w in range(sizes[q]):
                for v in range(s):
                    if not (unc[q][w] >> v) & 1:
                        continue
                    slot, rank = None, 3
                    for r in loose:  # prefer a row already holding one side of the pair, then the earliest
                        a, b = r[q], r[p]
                        if (a == w or a == _FREE) and (b == v or b == _FREE):
                            k = 2 if a == b == _FREE else (0 if b == v else 1)
                            if k < rank:
                                slot, rank = r, k
                                if k == 0:
                                    break
                    if slot is None:
                        slot = [_FREE] * n
                        rows.append(slot)
                        loose.append(slot)
                    slot[q], slot[p] = w, v
                    cover(slot)
    body, seen = [], {tuple(first), tuple(last)}
    for r in rows:  # free positions -> 0; a row that duplicates another (or a bookend) adds nothing
        t = tuple(0 if x == _FREE else x for x in r)
        if t not in seen:
            seen.add(t)
            body.append(t)
    return [tuple(first)] + body + [tuple(last)]


def coverage_rows(op) -> list[dict]:
    """The covering array of ``op`` as {axis: value} rows, before building and repair."""
    axes = coverage_axes(op)
    return [{name: pool[i] for (name, pool), i in zip(axes, row)}
            for row in covering_rows([len(pool) for _, pool in axes])]


# -- cases: build, repair, grad, bytes, fit ------------------------------------------------------

def _used_dims(op, present) -> set[str]:
    used = set()
    for name, spec in op.specs.items():
        if not spec.optional or name in present:
            used.update(spec.names)
    return used


def build(op, dims: dict, dtype: str, args: dict, present) -> Case:
    """A Case from axis values (``...`` among ``dims``); dims only absent optionals name are dropped."""
    present = tuple(n for n in op.optional if n in set(present))
    used = _used_dims(op, present)
    batch = _batch(dims.get(BATCH, 0))
    return Case({k: int(v) for k, v in dims.items() if k != BATCH and k in used}, batch, dtype,
                {n: args[n] for n in op.scalars}, present)


def _largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is <= ``cap`` (and >= 1)."""
    for d in range(max(1, min(n, cap)), 0, -1):
        if n % d == 0:
            return d
    return 1


# Validity rules keyed by the dim or scalar they repair: fn(value, dims, batch, args) -> value.
# A rule runs only when the dims/args it reads are present in the case.
_DIM_RULES = {
    "kv_heads": (("q_heads",), lambda v, d, b, a: _largest_divisor(d["q_heads"], v)),
    "boundaries": (("total",), lambda v, d, b, a: min(v, d["total"] + 1)),
}
_ARG_RULES = {
    "num_groups": (("channels",), lambda v, d, b, a: _largest_divisor(d["channels"], v)),
}
# Dims an op's kernel halves without a derived token saying so (rope rotates head_dim's halves).
_EVEN_DIMS = {"rope": ("head_dim",)}
# Leading '...' an op broadcasts against a dim (rope's cos/sin: none, 1 or the batch).
_BATCH_RULES = {"rope": (("batch",), lambda b, d: b if b in ((), (1,), (d["batch"],)) else (1,))}


def repair(op, case: Case) -> Case:
    """Snap independently drawn values onto the op's cross-axis relations (idempotent).

    kv_heads -> the largest divisor of q_heads <= min(q_heads, kv_heads); rope's cos/sin batch in
    {none, 1, batch} (else 1); boundaries <= total + 1; num_groups -> the largest divisor of channels <= num_groups;
    rope's head_dim rounded down to even (min 2).
    """
    dims = dict(case.dims)
    args = dict(case.args)
    for name in _EVEN_DIMS.get(op.name, ()):
        if name in dims:
            dims[name] = max(2, dims[name] - dims[name] % 2)
    for name, (needs, rule) in _DIM_RULES.items():
        if name in dims and all(n in dims for n in needs):
            dims[name] = rule(dims[name], dims, case.batch, args)
    for name, (needs, rule) in _ARG_RULES.items():
        if isinstance(args.get(name), int) and all(n in dims for n in needs):
            args[name] = rule(args[name], dims, case.batch, args)
    batch = case.batch
    needs, rule = _BATCH_RULES.get(op.name, ((), None))
    if rule is not None and all(n in dims for n in needs):
        batch = rule(batch, dims)
    if dims == case.dims and args == case.args and batch == case.batch:
        return case
    return Case(dims, batch, case.dtype, args, case.present)


def _inputs(op, case: Case):
    for name, spec in op.specs.items():
        if not spec.optional or name in case.present:
            yield name, spec


def _itemsize(spec, dtype: str) -> int:
    if not spec.is_float:
        return _INT_BYTES
    names = {str(d).removeprefix("torch.") for d in spec.dtypes}
    if dtype in names:
        return _ITEMSIZE[dtype]
    # make_inputs casts to the first admitted dtype (sorted by name) when the case dtype is not admitted
    fallback = str(sorted(spec.dtypes, key=str)[0]).removeprefix("torch.")
    return _ITEMSIZE.get(fallback, 4)


def estimated_bytes(op, case: Case) -> int:
    """Input bytes from the annotations alone: case-dtype itemsize for floats, 8 per int element."""
    return sum(math.prod(shape_of(spec, case)) * _itemsize(spec, case.dtype) for _, spec in _inputs(op, case))


def wants_grad(op, case: Case) -> bool:
    """False for ops without floating inputs and for fp16 cases the fan-in rule makes forward-only.

    fp16: a floating input whose annotation lacks a temporal dim of the case (seq/tokens/total) has
    its gradient reduced over that extent, times the batch product when it lacks ``...`` while the
    case has a batch; an extent >= 32768 plans the case forward-only.
    """
    floats = [spec for _, spec in _inputs(op, case) if spec.is_float]
    if not floats:
        return False
    if case.dtype != "float16":
        return True
    temporal = [n for n in sorted(case.dims) if dim(n).temporal]
    for spec in floats:
        names = set(spec.names)
        extent = math.prod(case.dims[n] for n in temporal if n not in names)
        if case.batch and not spec.variadic:
            extent *= math.prod(case.batch)
        if extent >= FANIN_LIMIT:
            return False
    return True


def copies(dtype: str, grad: bool) -> int:
    """Resident input copies of one correctness run: native, fp64 truth, gradients and workspace."""
    r = max(1, 8 // _ITEMSIZE.get(dtype, 4))
    return 7 + 2 * r if grad else 5 + r


def workspace_bytes(op, case: Case, grad: bool) -> int:
    """The reference's declared intermediates in the fp64 truth run plus the native one (at least fp32);
    autograd keeps about as much again for the backward."""
    if op.workspace is None:
        return 0
    return op.workspace(case) * (8 + 4) * (2 if grad else 1)


def footprint(op, case: Case, grad: bool, inputs: int | None = None) -> int:
    """Bytes one correctness run holds at once: input copies (native, truth, gradients) and workspace;
    ``inputs``: the case's estimated_bytes when already known."""
    inputs = estimated_bytes(op, case) if inputs is None else inputs
    return inputs * copies(case.dtype, grad) + workspace_bytes(op, case, grad)


def fits(op, case: Case, grad: bool, device_bytes: int) -> bool:
    return footprint(op, case, grad) <= device_bytes * HEADROOM


def stratum(profile: str, dtype: str, grad: bool) -> str:
    return f"{profile}-{dtype}-{'grad' if grad else 'fwd'}"


def _stratum_key(s: str) -> tuple:
    profile, dtype, mode = s.split("-")
    return (PROFILES.index(profile) if profile in PROFILES else len(PROFILES),
            DTYPES.index(dtype) if dtype in DTYPES else len(DTYPES), mode != "grad", s)


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", str(value)).strip("_").lower() or "none"


# -- plan assembly -------------------------------------------------------------------------------

class _Collector:
    """Deduplicates by (case_id, grad), first seen wins; counts distinct unfit cases."""

    def __init__(self, op, device_bytes: int):
        self.op, self.device_bytes = op, device_bytes
        self.planned: dict[tuple[str, bool], Planned] = {}
        self.bytes: dict[str, int] = {}
        self.unfit: set[str] = set()

    def admit(self, case: Case, profile: str, series: str) -> bool:
        """Plan ``case`` (already repaired) unless it cannot fit; True when it is (or was) planned."""
        grad = wants_grad(self.op, case)
        cid = case.case_id
        key = (cid, grad)
        if key in self.planned:
            return True
        if cid not in self.bytes:
            self.bytes[cid] = estimated_bytes(self.op, case)
        if footprint(self.op, case, grad, self.bytes[cid]) > self.device_bytes * HEADROOM:
            self.unfit.add(cid)
            return False
        self.planned[key] = Planned(case, grad, stratum(profile, case.dtype, grad), series)
        return True

    def plan(self, curves: list[Curve]) -> Plan:
        cases = sorted(self.planned.values(),
                       key=lambda p: (_stratum_key(p.stratum), self.bytes[p.case.case_id], p.case.case_id))
        return Plan(self.op.name, cases, curves, len(self.unfit))


def _variants(op, axis: str) -> list[tuple[str, dict, tuple]]:
    defaults = {n: pool[0] for n, pool in op.arg_pools.items()}
    out = [("base", defaults, ())]
    if axis == primary_axis(op):
        for n, pool in op.arg_pools.items():
            for v in pool[1:]:
                out.append((f"arg-{_slug(n)}-{_slug(v)}", {**defaults, n: v}, ()))
        out += [(f"present-{_slug(n)}", defaults, (n,)) for n in op.optional]
    return out


def _axis_values(op, axis: str, profile: str) -> list:
    pool = _pool(op, axis)
    if profile == "long":
        return [v for v in pool if v >= LONG_MIN]
    if _temporal(op, axis):
        cap = axis_dim(op, axis).cap or TEMPORAL_CAP
        return [v for v in pool if v <= cap]
    return list(pool)


def _sweep(op, axis: str, values, fixed: dict, dtype: str, args: dict, present: tuple,
           collector: _Collector, profile: str, series: str) -> list[Case]:
    """Repaired, fitting cases of the sweep, ascending; points whose repair moves a fixed value are dropped."""
    cases: dict[str, Case] = {}
    for v in values:
        raw = build(op, {**fixed, axis: v}, dtype, args, present)
        case = repair(op, raw)
        if case is not raw:
            pinned = [k for k in raw.dims if k != axis]
            if any(case.dims[k] != raw.dims[k] for k in pinned) or case.args != raw.args:
                continue
        if case.case_id in cases or not collector.admit(case, profile, series):
            continue
        cases[case.case_id] = case
    return sorted(cases.values(), key=lambda c: (c.batch if axis == BATCH else c.dims[axis], c.case_id))


def _curve(name, profile, axis, dtype, variant, cases, args, present) -> Curve:
    first = cases[0]
    fixed = {k: v for k, v in sorted(first.dims.items()) if k != axis}
    return Curve(name, profile, axis, dtype, variant, fixed, () if axis == BATCH else first.batch, dict(args),
                 tuple(present), tuple(c.case_id for c in cases))


def _curves(op, profile: str, collector: _Collector) -> list[Curve]:
    axes = dim_axes(op)
    swept = axes if profile == "production" else [a for a in axes if _temporal(op, a)]
    curves = []
    for dtype in dtypes_of(op):
        for axis in swept:
            fixed = {a: _anchor(op, a, profile) for a in axes if a != axis}
            for variant, args, present in _variants(op, axis):
                name = f"curve:{profile}:{axis}:{dtype}:{variant}"
                # Admit to a trial collector first: a curve that fails the >= 2 rule plans nothing.
                trial = _Collector(op, collector.device_bytes)
                cases = _sweep(op, axis, _axis_values(op, axis, profile), fixed, dtype, args, present, trial,
                               profile, name)
                collector.unfit |= trial.unfit
                if len(cases) < 2:
                    continue
                for c in cases:
                    collector.admit(c, profile, name)
                curves.append(_curve(name, profile, axis, dtype, variant, cases, args, present))
    return curves


def case_plan(op, device_bytes: int) -> Plan:
    """Coverage, then production curves, then long-context curves; deduplicated, fitted, ordered."""
    collector = _Collector(op, device_bytes)
    for row in coverage_rows(op):
        dims = {a: row[a] for a in dim_axes(op)}
        present = tuple(n for n in op.optional if row[f"+{n}"])
        case = repair(op, build(op, dims, row["dtype"], {n: row[n] for n in op.arg_pools}, present))
        collector.admit(case, "coverage", "coverage")
    curves = _curves(op, "production", collector) + _curves(op, "long", collector)
    return collector.plan(curves)


def sample(plan: Plan, limit: int) -> Plan:
    """A deterministic random sample (random.Random(0)) of ``limit`` planned cases, in plan order.

    Curves keep only their sampled case_ids; curves with none left are omitted.
    """
    if limit is None or limit >= len(plan.cases):
        return Plan(plan.op, list(plan.cases), list(plan.curves), plan.dropped)
    keep = sorted(random.Random(0).sample(range(len(plan.cases)), max(0, limit)))
    cases = [plan.cases[i] for i in keep]
    ids = {p.case.case_id for p in cases}
    curves = []
    for c in plan.curves:
        kept = tuple(i for i in c.case_ids if i in ids)
        if kept:
            curves.append(replace(c, case_ids=kept))
    return Plan(plan.op, cases, curves, plan.dropped)


def curves_only(plan: Plan) -> Plan:
    """The cases on named curves alone (what a release fill runs; coverage is sampled elsewhere)."""
    ids = {i for c in plan.curves for i in c.case_ids}
    return Plan(plan.op, [p for p in plan.cases if p.case.case_id in ids], list(plan.curves), plan.dropped)


def gated(op, impl, planned: Planned) -> str | None:
    """Why ``impl`` cannot run ``planned`` whatever the tensors hold (static gates, forward-only), or None."""
    if impl.forward_only and planned.grad:
        return "forward-only"
    if not impl.admits_static(planned.case.dtype, planned.case.args, planned.case.present):
        return "gate"
    return None


# -- slices --------------------------------------------------------------------------------------

def _valid_names(op) -> list[str]:
    return [a for a in dim_axes(op)] + ["dtype"] + list(op.scalars)


def _snap(value, pool):
    """A context value onto the pool value it means (1e-06 vs 0.000001, 0 vs 0.0, 'True' vs True)."""
    for p in pool:
        if type(p) is type(value) and p == value:
            return p
    for p in pool:
        if p == value or str(p) == str(value) or repr(p) == str(value):
            return p
    return value


def slice_cases(op, axis: str, context: dict, device_bytes: int) -> Plan:
    """Vary ``axis`` over its production pool (temporal capped at 32K) in exactly ``context``.

    ``context`` holds ``dtype``, every other dim (``...`` as a list, or 0/n), every scalar arg and
    optionally ``present`` (the optional tensors passed; default none). A point that repair would
    change in any fixed value is dropped, never altered.
    """
    axes = dim_axes(op)
    if axis not in axes:
        raise ValueError(f"{op.name}: unknown slice axis {axis!r}; axes are {', '.join(axes)}")
    present = tuple(context.get("present", ()))
    bad = [n for n in present if n not in op.optional]
    if bad:
        raise ValueError(f"{op.name}: {', '.join(bad)} not optional tensors; "
                         f"optional: {', '.join(op.optional) or 'none'}")
    unknown = [k for k in context if k not in _valid_names(op) and k != "present"]
    if unknown:
        raise ValueError(f"{op.name}: unknown slice context {', '.join(unknown)}; valid: {', '.join(_valid_names(op))}")
    used = _used_dims(op, present)
    needed = ["dtype"] + [a for a in axes if a != axis and (a == BATCH or a in used)] + list(op.scalars)
    missing = [k for k in needed if k not in context]
    if missing:
        raise ValueError(f"{op.name}: the slice context lacks {', '.join(missing)}")
    dtype = context["dtype"]
    if dtype not in dtypes_of(op):
        raise ValueError(f"{op.name}: dtype {dtype!r} is not one of {', '.join(dtypes_of(op))}")
    fixed = {a: context[a] for a in axes if a != axis and a in context}
    if BATCH in fixed:
        fixed[BATCH] = _batch(fixed[BATCH])
    args = {n: context[n] for n in op.scalars}
    canonical = [axis, dtype, sorted((k, list(v) if isinstance(v, tuple) else int(v)) for k, v in fixed.items()),
                 sorted((k, repr(v)) for k, v in args.items()), sorted(present)]
    digest = hashlib.sha1(json.dumps(canonical).encode()).hexdigest()[:8]
    name = f"curve:slice:{axis}:{dtype}:ctx-{digest}"
    collector = _Collector(op, device_bytes)
    ordered = _sweep(op, axis, _axis_values(op, axis, "production"), fixed, dtype, args, present, collector,
                     "production", name)
    curves = [_curve(name, "slice", axis, dtype, f"ctx-{digest}", ordered, args, present)] if ordered else []
    return collector.plan(curves)


def _decode(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def parse_slice(op, tokens: list[str]) -> tuple[str, dict]:
    """CLI ``--slice`` tokens ``AXIS name=JSON ... +optional`` -> (axis, context).

    Values are JSON-decoded when possible (else kept as strings) and snapped onto the matching
    pool value; ``...=[8]`` fixes the batch. Unknown names raise ValueError listing valid ones.
    """
    tokens = list(tokens)
    axes = dim_axes(op)
    if not tokens:
        raise ValueError(f"{op.name}: --slice needs an axis first; axes are {', '.join(axes)}")
    axis, rest = tokens[0], tokens[1:]
    if axis not in axes:
        raise ValueError(f"{op.name}: unknown slice axis {axis!r}; axes are {', '.join(axes)}")
    valid = _valid_names(op)
    context: dict = {}
    present: list[str] = []
    for tok in rest:
        if tok.startswith("+"):
            name = tok[1:]
            if name not in op.optional:
                raise ValueError(f"{op.name}: unknown optional tensor {name!r}; optional: "
                                 f"{', '.join(op.optional) or 'none'}")
            if name not in present:
                present.append(name)
            continue
        name, eq, raw = tok.partition("=")
        if not eq:
            raise ValueError(f"{op.name}: bad slice token {tok!r}; use name=JSON or +optional")
        if name not in valid:
            raise ValueError(f"{op.name}: unknown slice name {name!r}; valid: {', '.join(valid)}")
        value = _decode(raw)
        if name == BATCH:
            if not (isinstance(value, int) or (isinstance(value, list) and all(isinstance(v, int) for v in value))):
                raise ValueError(f"{op.name}: '...' takes a JSON list of ints such as [8], got {raw!r}")
            value = list(_batch(value))
        elif name == "dtype":
            value = str(value)
        elif name in op.scalars:
            value = _snap(value, op.arg_pools[name])
        elif not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{op.name}: dim {name!r} takes an int, got {raw!r}")
        context[name] = value
    context["present"] = tuple(n for n in op.optional if n in present)
    return axis, context


# -- budget frontier -----------------------------------------------------------------------------

class Frontier:
    """Minimal exhausted (OOM or timeout) points; a candidate at least as large in every dim and
    batch entry as one of them, with identical dtype, args, present set, batch rank and dim names,
    in the same (grad, stratum), is blocked. Crashes are never added (the caller decides)."""

    def __init__(self):
        self._points: dict[tuple, list[tuple[int, ...]]] = {}

    @staticmethod
    def _key(case: Case, grad: bool, stratum: str) -> tuple:
        return (bool(grad), stratum, case.dtype, json.dumps(sorted(case.args.items()), default=repr),
                tuple(sorted(case.present)), len(case.batch), tuple(sorted(case.dims)))

    @staticmethod
    def _vector(case: Case) -> tuple[int, ...]:
        return tuple(case.dims[n] for n in sorted(case.dims)) + tuple(case.batch)

    def add(self, case: Case, grad: bool, stratum: str) -> None:
        points = self._points.setdefault(self._key(case, grad, stratum), [])
        vec = self._vector(case)
        if any(all(a <= b for a, b in zip(p, vec)) for p in points):
            return  # already dominated: not minimal
        points[:] = [p for p in points if not all(a <= b for a, b in zip(vec, p))] + [vec]

    def blocks(self, case: Case, grad: bool, stratum: str) -> bool:
        points = self._points.get(self._key(case, grad, stratum), ())
        vec = self._vector(case)
        return any(all(a <= b for a, b in zip(p, vec)) for p in points)

    def __len__(self) -> int:
        return sum(len(p) for p in self._points.values())
