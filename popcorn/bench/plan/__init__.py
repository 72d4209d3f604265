"""The case plan: which cases ``bench fill`` (and the sweep and the explorer) measure for an op.

``case_plan(op, device_bytes)`` is one deterministic function of the op's annotations, scalar
pools, optional tensors and declared constraints, the dims vocabulary (:mod:`popcorn.core.dims`)
and the device's memory. It never touches a device. Three profiles make up a plan:

* ``coverage``: a strength-2 covering array (a deterministic IPOG greedy build, :mod:`.covering`)
  over every dim pool, the dtypes, each scalar pool and a presence axis per optional tensor, plus
  the all-first and all-last rows. Every value and every pair of values of two axes appears
  (before repair, which may merge rows).
* ``production``: one-axis curves (:mod:`.curves`) through each dim's pool with every other dim
  pinned to its production anchor (temporal axes capped at 32K, token rows at 64K); the primary axis
  (the op's ``primary``, else a default from its annotations) also gets one curve per non-default
  scalar value and per optional tensor. A row-wise op's leading ``...`` counts token rows
  (``register_kernel(batch="token_rows")``), so its curves run at 4096 rows and its rows curve
  through 64K at production widths, as training calls it.
* ``long``: the same over temporal axes only, from 8K to 1M, the other dims pinned to the small
  long-context anchors.

Every case is repaired onto the op's declared constraints (:func:`repair`, from
:mod:`popcorn.core.constraints`); curve and slice (:mod:`.slices`) points whose repair would change a
pinned value are dropped rather than altered, so a curve's context is exactly its metadata. fp16
cases whose backward reduces 32K or more positions into one input are planned forward-only, and
cases whose correctness copies (native, fp64 truth, gradients and the reference's declared
workspace) cannot fit the device are dropped (:mod:`.cases`). Cases run smallest-first within each
stratum so a fill's OOM/timeout frontier (:mod:`popcorn.bench.frontier`) meets its boundary before
paying for anything beyond it.
"""

from .axes import (BATCH, DTYPES, LONG_MIN, PROFILES, TEMPORAL_CAP, axis_dim, coverage_axes, dim_axes, dtypes_of,
                   primary_axis)
from .cases import (FANIN_LIMIT, HEADROOM, Planned, build, copies, estimated_bytes, fits, footprint, gated, repair,
                    strata_of, stratum, wants_grad, workspace_bytes)
from .covering import coverage_rows, covering_rows
from .curves import Curve, Plan, case_plan, curves_only, only_strata, sample
from .slices import slice_cases

__all__ = [
    "BATCH", "DTYPES", "LONG_MIN", "PROFILES", "TEMPORAL_CAP", "axis_dim", "coverage_axes", "dim_axes", "dtypes_of",
    "primary_axis", "FANIN_LIMIT", "HEADROOM", "Planned", "build", "copies", "estimated_bytes", "fits", "footprint",
    "gated", "repair", "strata_of", "stratum", "wants_grad", "workspace_bytes", "coverage_rows", "covering_rows", "Curve", "Plan",
    "case_plan", "curves_only", "only_strata", "sample", "slice_cases",
]
