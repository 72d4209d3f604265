"""The sweep's partitions: ``case`` = "op.stratum" keys from the plan ``bench fill`` runs, and the
measurements' 2-D ``backend x case`` grid.

A case key names an op and one stratum of its plan (``rms_norm.production-bfloat16-grad``); its
partition runs ``popcorn bench fill OP --stratum STRATUM``. The keys are those of the plans for a
device of ``POPCORN_SWEEP_DEVICE_MEMORY_GIB`` (default 141, an H200): a smaller device's plan has a
subset of those strata (a stratum only vanishes when none of its cases fits), so one key set serves
every device, and a partition whose stratum has no case that fits the device measures nothing.

The backend dimension holds the backend families that have an implementation on some op (``compile``,
``liger``, ``fla``, ...), the reference excepted: the reference is the ``reference`` asset, partitioned
by case alone. Dagster 1.13 allows two dimensions at most and forbids ``| , [ ]`` in a dimension's keys
(and ``...`` in any key): keys are checked here, at load, and name what was wrong.
"""

from __future__ import annotations

import functools
import os
import warnings

import dagster as dg

from popcorn.bench import plan as planning
from popcorn.core.registry import Op
from popcorn.kernels import OPS
from popcorn.schema import REFERENCE

SEP = "."  # between op and stratum: neither contains it, and Dagster allows it
FORBIDDEN = frozenset("|,[]")  # Dagster: not in a multi-partition dimension's keys
FORBIDDEN_SUBSTRINGS = ("...",)  # Dagster: not in any partition key
PLAN_MEMORY_GIB = 141.0


def plan_memory() -> int:
    """Bytes of the device the partition keys are planned for (``POPCORN_SWEEP_DEVICE_MEMORY_GIB``)."""
    return int(float(os.environ.get("POPCORN_SWEEP_DEVICE_MEMORY_GIB", PLAN_MEMORY_GIB)) * 2**30)


def _checked(key: str, what: str) -> str:
    bad = sorted(c for c in FORBIDDEN if c in key) + [s for s in FORBIDDEN_SUBSTRINGS if s in key]
    if bad:
        raise ValueError(f"{what} {key!r} contains {', '.join(map(repr, bad))}, which Dagster forbids in "
                         "partition keys; rename it")
    return key


def case_key(op: str, stratum: str) -> str:
    """The partition key of ``op``'s ``stratum``: ``op.stratum``."""
    if SEP in op:
        raise ValueError(f"op name {op!r} contains {SEP!r}, the case key separator; rename the op")
    return _checked(f"{op}{SEP}{stratum}", "case key")


def split_case(key: str) -> tuple[str, str]:
    """(op, stratum) of a case key."""
    op, sep, stratum = key.partition(SEP)
    if not sep or op not in OPS:
        raise ValueError(f"{key!r} is no case key: expected OP{SEP}STRATUM with OP one of {', '.join(sorted(OPS))}")
    return op, stratum


def family(impl_name: str) -> str:
    """The backend family of an implementation name (``fla:recurrent`` -> ``fla``)."""
    return impl_name.split(":")[0]


def families(op: Op) -> list[str]:
    """The backend families with an implementation on ``op``, the reference's excepted, in registry order."""
    return list(dict.fromkeys(family(n) for n in op.implementations if n != REFERENCE))


def applies(backend: str, key: str) -> bool:
    """Whether the op of case ``key`` has an implementation of family ``backend``."""
    return backend in families(OPS[split_case(key)[0]])


@functools.lru_cache(maxsize=None)
def case_keys(ops: tuple[str, ...] | None = None, curves_only: bool = False) -> tuple[str, ...]:
    """Every ``op.stratum`` of the plans of ``ops`` (default: every op), op by op in plan order;
    ``curves_only``: those with a case on a named curve (the others' partitions would measure nothing)."""
    keys = []
    for name in ops or sorted(OPS):
        the_plan = planning.case_plan(OPS[name], plan_memory())
        if curves_only:
            the_plan = planning.curves_only(the_plan)
        keys += [case_key(name, s) for s in dict.fromkeys(p.stratum for p in the_plan.cases)]
    return tuple(keys)


def backend_keys() -> list[str]:
    """The backend families some op has an implementation of, the reference excepted."""
    keys = dict.fromkeys(f for name in sorted(OPS) for f in families(OPS[name]))
    return [_checked(k, "backend family") for k in keys]


CASES = dg.StaticPartitionsDefinition(list(case_keys()))
MEASUREMENTS = dg.MultiPartitionsDefinition({"backend": dg.StaticPartitionsDefinition(backend_keys()),
                                             "case": CASES})
# Each measurement partition reads the reference partition of its case (the mapping is beta in 1.13).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)
    TO_REFERENCE = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="case")


def measurement_key(backend: str, case: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"backend": backend, "case": case})
