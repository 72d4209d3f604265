"""Correctness: judge a candidate against the reference's fp64 truth, with the reference's own
native-precision error as the budget.

Per trial (seeded fresh inputs), the reference runs in fp64 (truth) and at native precision
(budget), the candidate at native precision. Each floating output and each input gradient
keeps a gauge: err = max |candidate - truth|, budget = max |reference_native - truth|,
scale = max(1, max |truth|). A gauge passes iff err <= max(2 * budget, floor(dtype) * scale).
Memory the candidate allocates is poisoned (NaN / max-int), so elements it never writes fail.
"""

from __future__ import annotations

import contextlib
import gc
import json
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from popcorn.schema import CRASH, ERROR, FAIL, OOM, PASS, REFERENCE_TIMED

from . import lane
from .calls import cotangents, graded, leaves_of, outputs_of, prepare
from .timing import measure

FLOORS = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 1e-3, torch.bfloat16: 2e-2}


@dataclass
class Gauge:
    err: float = 0.0
    budget: float = 0.0
    scale: float = 1.0

    @staticmethod
    def measure(mine: torch.Tensor, native: torch.Tensor, truth: torch.Tensor) -> torch.Tensor | None:
        """On the device, without a sync: the candidate's and the native reference's max error against
        the fp64 truth, and the truth's largest finite magnitude; None for an empty output."""
        if truth.numel() == 0:
            return None
        truth = truth.detach().double()
        scale = torch.where(torch.isfinite(truth), truth.abs(), torch.zeros((), dtype=truth.dtype, device=truth.device))
        return torch.stack([_max_abs_diff(mine.detach().double(), truth),
                            _max_abs_diff(native.detach().double(), truth), scale.max()])

    def fold(self, values: list[float]) -> None:
        err, budget, scale = values
        self.err = max(self.err, _finite_or_inf(err))
        self.budget = max(self.budget, _finite_or_inf(budget))
        self.scale = max(self.scale, scale)

    def verdict(self, floor: float) -> str | None:
        """None when the gauge passes, else why not."""
        if self.err != self.err or self.err == float("inf"):
            return "err is non-finite"
        limit = max(2 * self.budget, floor * self.scale)
        if self.err > limit:
            return f"err {self.err:.3g} > max(2*budget {self.budget:.3g}, floor*scale {floor * self.scale:.3g})"
        return None

    def as_dict(self) -> dict:
        return {"err": self.err, "budget": self.budget, "scale": self.scale}


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """max |a - b| as a 0-d tensor (NaN where a NaN stands against a number); both non-empty."""
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))  # equal infinities and NaN==NaN count as 0
    return torch.where(same, torch.zeros_like(a), (a - b).abs()).max()


def _finite_or_inf(value: float) -> float:
    return float("inf") if value != value else value


def _measure(pending: list, gauge: Gauge, mine: torch.Tensor, native: torch.Tensor, truth: torch.Tensor) -> None:
    """Queue the gauge's update on the device (no sync): ``pending`` is folded once per check."""
    if (v := Gauge.measure(mine, native, truth)) is not None:
        pending.append((gauge, v))


def _fold(pending: list) -> None:
    """Update each queued (gauge, values) with one device sync for all: beside other workers' trials
    every sync waits its turn on the device (contexts time-slice it), so a check syncs once, not per trial."""
    if not pending:
        return
    try:
        values = torch.stack([v for _, v in pending]).tolist()
    except RuntimeError:  # outputs on several devices
        values = [v.tolist() for _, v in pending]
    for (gauge, _), v in zip(pending, values):
        gauge.fold(v)
    pending.clear()


@dataclass
class Result:
    """What measuring one candidate on one case found. ``timing`` holds the Record's timing columns."""

    status: str
    reason: str | None = None
    fwd: dict[str, Gauge] = field(default_factory=dict)
    bwd: dict[str, Gauge] = field(default_factory=dict)
    reps: int = 0
    grad: bool = False
    timing: dict = field(default_factory=dict)
    timer: str | None = None
    bench_error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def gauges_json(self) -> tuple[str | None, str | None]:
        f = json.dumps({k: g.as_dict() for k, g in self.fwd.items()}) if self.fwd else None
        b = json.dumps({k: g.as_dict() for k, g in self.bwd.items()}) if self.bwd else None
        return f, b


def is_oom(e: BaseException) -> bool:
    """CUDA's OutOfMemoryError, the host allocator's failure (CPU tensors), or Python's MemoryError."""
    text = str(e).lower()
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text \
        or "can't allocate memory" in text


def free_memory(held: int | None = None) -> None:
    """Give unused device memory back. ``held``: the bytes allocated before the work being cleaned up;
    when no more than that (plus GC_SLACK) is still allocated, nothing is caught in a reference cycle and
    the collection is skipped: it costs about 0.1 s in a process that has compiled."""
    if held is None or not torch.cuda.is_available() or torch.cuda.memory_allocated() > held + GC_SLACK:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


GC_SLACK = 16 * 2**20


def describe(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:500]}" if text else type(e).__name__


@contextlib.contextmanager
def poisoned(like: list | None = None):
    """Make memory the candidate allocates hold NaN / max-int, so elements it never writes fail.

    CUDA: fill blocks of the sizes the candidate will allocate (``like``: the reference's outputs
    or gradients) with poison and hand them back to the caching allocator, which gives the
    same-sized blocks to the candidate next. No global mode changes, so compiled candidates
    generate the same code as when they are timed. CPU: torch's deterministic-mode fill of
    uninitialized memory (the CPU allocator keeps no blocks to pre-poison).
    """
    cuda = [t for t in (like or []) if isinstance(t, torch.Tensor) and t.is_cuda]
    if cuda:
        bufs = [torch.full(t.shape, float("nan") if t.is_floating_point() else torch.iinfo(t.dtype).max
                           if t.dtype != torch.bool else True, dtype=t.dtype, device=t.device) for t in cuda]
        del bufs
        yield
        return
    was = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warn_only's notes on nondeterministic kernels
            yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill


def _backward(outputs: list, leaves: dict, cots: list, idx: list[int]) -> dict:
    if not idx:
        return {k: None for k in leaves}
    outs = [outputs[i] for i in idx]
    grads = torch.autograd.grad(outs, list(leaves.values()),
                                [cots[i].to(outputs[i].dtype) for i in idx],
                                allow_unused=True)
    return dict(zip(leaves, grads))


def floor_for(arguments: dict) -> float:
    """The largest floor over the floating inputs' dtypes (a mixed fp32/bf16 call gets bf16's)."""
    floors = [FLOORS.get(v.dtype, 2e-2) for v in arguments.values()
              if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return max(floors, default=FLOORS[torch.float32])


def _structure(mine: list, native: list, dtypes: dict[int, torch.dtype]) -> str | None:
    """Why ``mine`` does not have the structure of the native-precision reference's outputs: count,
    type, shape, dtype (or the declared one) and device of each; None when it does."""
    if len(mine) != len(native):
        return f"returned {len(mine)} outputs, the reference {len(native)}"
    for i, (m, t) in enumerate(zip(mine, native)):
        if isinstance(t, torch.Tensor) != isinstance(m, torch.Tensor):
            return f"out{i}: returned {type(m).__name__}, the reference {type(t).__name__}"
        if isinstance(t, torch.Tensor):
            if tuple(m.shape) != tuple(t.shape):
                return f"out{i}: shape {list(m.shape)}, the reference {list(t.shape)}"
            want = dtypes.get(i, t.dtype)
            if m.dtype != want:
                declared = " (declared by the backend)" if i in dtypes else ""
                return f"out{i}: dtype {_name(m.dtype)}, the reference {_name(want)}{declared}"
            if m.device != t.device:
                return f"out{i}: device {m.device}, the reference {t.device}"
    return None


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class Truth:
    """The reference's side of one trial, shared by every candidate of a case: the native inputs, the
    fp64 truth and the native-precision budget outputs, and with gradients their cotangents and input
    gradients. ``failed`` instead when the inputs or the reference could not be made."""

    native: dict | None = None
    truth: list = field(default_factory=list)
    budget: list = field(default_factory=list)
    idx: list = field(default_factory=list)
    cots: list = field(default_factory=list)
    g_truth: dict = field(default_factory=dict)
    g_budget: dict = field(default_factory=dict)
    failed: tuple | None = None  # (status, reason)

    def nbytes(self) -> int:
        tensors = list((self.native or {}).values()) + self.truth + self.budget + self.cots
        tensors += list(self.g_truth.values()) + list(self.g_budget.values())
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def reference_trial(reference: Callable, draw: Callable[[int], dict], trial: int, grad: bool, frozen=()) -> Truth:
    """Trial ``trial``'s reference side (inputs are drawn here)."""
    try:
        native = draw(trial)
    except Exception as e:  # noqa: BLE001 - any failure to make inputs is the harness's
        return Truth(failed=(OOM if is_oom(e) else ERROR, f"inputs: {describe(e)}"))
    try:  # the fp64 copies are the largest allocation of a trial: running out here is an oom row
        truth_args, budget_args = prepare(native, torch.float64, grad, frozen), prepare(native, None, grad, frozen)
    except Exception as e:  # noqa: BLE001
        free_memory()
        return Truth(failed=(OOM if is_oom(e) else ERROR, f"inputs: {describe(e)}"))
    try:
        with torch.enable_grad() if grad else torch.no_grad():
            truth = outputs_of(reference(**truth_args))
            budget = outputs_of(reference(**budget_args))
    except Exception as e:  # noqa: BLE001
        free_memory()
        return Truth(failed=(OOM if is_oom(e) else ERROR, f"reference: {describe(e)}"))
    t = Truth(native, truth, budget)
    if grad:
        t.idx, t.cots = graded(truth), cotangents(truth, trial)
        try:
            t.g_truth = _backward(truth, leaves_of(truth_args), t.cots, t.idx)
            t.g_budget = _backward(budget, leaves_of(budget_args), t.cots, t.idx)
        except Exception as e:  # noqa: BLE001
            free_memory()
            return Truth(failed=(OOM if is_oom(e) else ERROR, f"reference backward: {describe(e)}"))
        t.truth, t.budget = [_detached(o) for o in truth], [_detached(o) for o in budget]
    return t


def _detached(o):
    return o.detach() if isinstance(o, torch.Tensor) else o


Truths = Callable[[int], Truth]  # trial -> its reference side (computed, or shared from a cache)


def check(reference: Callable, candidate: Callable, draw: Callable[[int], dict], *, trials: int,
          grad: bool, out_dtypes: Callable[[dict], dict] | None = None, frozen=(), truths: Truths | None = None
          ) -> Result:
    """Run ``trials`` correctness trials of ``candidate`` against ``reference``; inputs from ``draw(trial)``.

    Both callables take the op's arguments by keyword. Every output must have the native-precision
    reference's dtype and device, except those ``out_dtypes(arguments)`` declares ({index: dtype}).
    ``truths``: the reference's side of each trial when it is shared by several candidates (default:
    computed here). The trials hold the device's shared lane together and their gauges sync once.
    Returns a Result with status pass, fail, crash (candidate raised), oom, or error (the reference or
    the input draw failed).
    """
    truths = truths or (lambda trial: reference_trial(reference, draw, trial, grad, frozen))
    fwd: dict[str, Gauge] = {}
    bwd: dict[str, Gauge] = {}
    floor = None
    pending: list = []  # gauge updates queued on the device, folded with one sync at the end
    # One shared hold for every trial: a hold per trial waited through a timing hold each time other
    # workers timed between two trials.
    with lane.hold(lane.SHARED):
        try:
            for trial in range(trials):
                with lane.phase("truth"):
                    ref = truths(trial)
                if ref.failed:
                    return Result(*ref.failed, fwd, bwd, trial, grad)
                with lane.phase("trials"):
                    problem = _trial(ref, candidate, trial, trials, grad, out_dtypes, frozen, fwd, bwd, pending)
                if problem is not None:
                    return Result(*problem, fwd, bwd, trial, grad)
                floor = floor if floor is not None else floor_for(ref.native)
                del ref
        finally:
            with lane.phase("trials"):
                _fold(pending)
    reasons = [f"{k}: {v}" for k, g in fwd.items() if (v := g.verdict(floor))]
    reasons += [f"grad {k}: {v}" for k, g in bwd.items() if (v := g.verdict(floor))]
    return Result(FAIL if reasons else PASS, "; ".join(reasons) or None, fwd, bwd, trials, grad)


def _trial(ref: Truth, candidate: Callable, trial: int, trials: int, grad: bool, out_dtypes, frozen,
           fwd: dict, bwd: dict, pending: list) -> tuple | None:
    """One trial of the candidate against ``ref``, queueing the gauges' updates on ``pending``; (status,
    reason) when it ends the check."""
    try:
        mine_args = prepare(ref.native, None, grad, frozen)
    except Exception as e:  # noqa: BLE001
        free_memory()
        return OOM if is_oom(e) else ERROR, f"inputs: {describe(e)}"
    # On CPU poisoning turns on deterministic mode, which compiled code guards on; the last
    # trial runs as the timer will, so the artifact that gets timed is checked too.
    poison = poisoned(ref.budget) if trial < trials - 1 or trials == 1 else contextlib.nullcontext()
    try:
        with poison, (torch.enable_grad() if grad else torch.no_grad()):
            mine = outputs_of(candidate(**mine_args))
    except ImportError as e:  # a library installed in part (its metadata there, a module of it missing)
        free_memory()
        return ERROR, f"import: {describe(e)} (the backend's package does not import here: a broken install)"
    except Exception as e:  # noqa: BLE001
        free_memory()
        return OOM if is_oom(e) else CRASH, describe(e)
    problem = _structure(mine, ref.budget, out_dtypes(mine_args) if out_dtypes else {})
    if problem:
        return FAIL, problem
    for i, (m, n, t) in enumerate(zip(mine, ref.budget, ref.truth)):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            _measure(pending, fwd.setdefault(f"out{i}", Gauge()), m, n, t)
        elif isinstance(t, torch.Tensor):
            if not torch.equal(m.cpu(), t.cpu()):
                return FAIL, f"out{i}: integer output differs"
        elif m != t:
            return FAIL, f"out{i}: {m!r} != {t!r}"
    if not grad:
        return None
    try:
        mine_idx = graded(mine)
        if mine_idx != ref.idx:
            return FAIL, f"outputs {ref.idx} need gradients, the candidate's graph covers {mine_idx}"
        poison = [g for g in ref.g_budget.values() if g is not None]
        with poisoned(poison) if trial < trials - 1 or trials == 1 else contextlib.nullcontext():
            g_mine = _backward(mine, leaves_of(mine_args), ref.cots, ref.idx)
    except Exception as e:  # noqa: BLE001
        free_memory()
        return OOM if is_oom(e) else CRASH, f"backward: {describe(e)}"
    for name, t in ref.g_truth.items():
        m, n = g_mine.get(name), ref.g_budget.get(name)
        if t is None:
            if m is not None and m.abs().sum().item() != 0:
                return FAIL, f"grad {name}: unexpected nonzero gradient"
            continue
        if m is None:
            return FAIL, f"grad {name}: missing"
        if tuple(m.shape) != tuple(t.shape):
            return FAIL, f"grad {name}: shape {list(m.shape)}, the reference {list(t.shape)}"
        if n is None:
            return ERROR, f"grad {name}: the native reference gives none"
        _measure(pending, bwd.setdefault(name, Gauge()), m, n, t)
    return None


def compare(mine: Callable, reference: Callable, inputs: dict, *, backward: bool = True, benchmark: bool = True,
            trials: int = 3) -> Result:
    """Registry-free comparison of ``mine`` against ``reference`` on ``inputs`` (a dict of keyword arguments).

    Every trial reuses ``inputs``; ``backward`` also checks and times gradients of the floating
    inputs. ``timing`` in the Result carries both sides (``ref_*`` for the reference).
    """
    device = next((v.device for v in inputs.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
    result = check(reference, mine, lambda trial: inputs, trials=trials, grad=backward)
    if result.passed and benchmark:
        ref, _ = measure(reference, inputs, backward, device)
        result.timing, result.timer = measure(mine, inputs, backward, device)
        result.timing.update({f"ref_{k}": ref.get(k) for k in REFERENCE_TIMED})
    return result
