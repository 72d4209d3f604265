"""Shared check for op references: the reference against an independent fp64 formulation.

``agree`` draws inputs for a case with the op's own annotations and domains, runs the
reference and ``independent`` in fp64 (outputs and input gradients must match to ~1e-10),
then runs the reference at native precision and checks it against the fp64 independent
result within a per-dtype tolerance scaled by the output magnitude.
"""

from __future__ import annotations

import torch

from popcorn.core import Case
from popcorn.core.inputs import make_inputs

TOL = {"float64": 1e-9, "float32": 2e-5, "bfloat16": 4e-2, "float16": 8e-3}


def _outputs(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run(fn, arguments: dict, cotangent_seed: int):
    """Outputs and gradients (w.r.t. every float tensor input) of fn on a fresh copy of arguments."""
    args = {k: (v.detach().clone().requires_grad_(v.is_floating_point()) if isinstance(v, torch.Tensor) else v)
            for k, v in arguments.items()}
    outs = _outputs(fn(**args))
    leaves = {k: v for k, v in args.items() if isinstance(v, torch.Tensor) and v.requires_grad}
    g = torch.Generator().manual_seed(cotangent_seed)
    graded = [o for o in outs if o.is_floating_point() and o.requires_grad]
    cots = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in graded]
    grads = torch.autograd.grad(graded, list(leaves.values()), cots, allow_unused=True) if graded else ()
    return [o.detach() for o in outs], {k: gr for k, gr in zip(leaves, grads)}


def _close(name: str, got: torch.Tensor | None, want: torch.Tensor | None, tol: float) -> None:
    if want is None or got is None:
        assert got is None or not got.abs().sum(), f"{name}: gradient presence differs"
        return
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not got.is_floating_point():
        assert torch.equal(got.cpu(), want.cpu()), f"{name}: integer outputs differ"
        return
    got, want = got.double(), want.double()
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    err = (got - want).abs().max().item() if want.numel() else 0.0
    assert err <= tol * scale, f"{name}: max abs err {err:.3e} > {tol:.1e} * scale {scale:.3g}"


def agree(op, independent, case: Case, seed: int = 0, grad: bool = True) -> None:
    """Assert op's reference matches ``independent`` (same parameters, fp64) on ``case``, with grads."""
    native = make_inputs(op, case, seed)
    truth = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
             for k, v in native.items()}
    with torch.enable_grad():
        ref_out, ref_grad = _run(op.reference, truth, seed + 1)
        ind_out, ind_grad = _run(independent, truth, seed + 1)
    assert len(ref_out) == len(ind_out), "output count differs"
    for i, (a, b) in enumerate(zip(ref_out, ind_out)):
        _close(f"out{i} (fp64)", a, b, TOL["float64"])
    if grad:
        for k in ind_grad:
            _close(f"grad {k} (fp64)", ref_grad.get(k), ind_grad[k], TOL["float64"])
    if case.dtype != "float64":
        with torch.enable_grad():
            nat_out, nat_grad = _run(op.reference, native, seed + 1)
        for i, (a, b) in enumerate(zip(nat_out, ind_out)):
            if a.is_floating_point():
                assert a.dtype == native_dtype(native, a), f"out{i}: dtype {a.dtype} leaked"
            _close(f"out{i} ({case.dtype})", a, b, TOL[case.dtype])
        if grad:
            for k in ind_grad:
                _close(f"grad {k} ({case.dtype})", nat_grad.get(k), ind_grad[k], 4 * TOL[case.dtype])


def native_dtype(arguments: dict, out: torch.Tensor) -> torch.dtype:
    """The dtype an output should have: the dtype of the float inputs (fp32 losses are allowed)."""
    dtypes = {v.dtype for v in arguments.values() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    return out.dtype if out.dtype == torch.float32 or len(dtypes) != 1 else next(iter(dtypes))
