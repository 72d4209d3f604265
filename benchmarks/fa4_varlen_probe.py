"""Which attn_varlen cases FlashAttention 4's varlen backward gets wrong on this GPU.

    python benchmarks/fa4_varlen_probe.py

Run 16 (H100): the conformance test's small case (bf16, 4 query heads over 2 KV heads, head_dim 8, 12 tokens
in 2 sequences) had the right forward and wrong gradients, while the dense ``attn`` on the same heads passed.
This varies one thing at a time from that case: head_dim, the GQA ratio, the number and length of sequences,
causal. Each row is the harness's own verdict against the fp64 reference (2 trials, as the conformance test),
fa4 and, beside it, the dense fa4 ``attn`` on the same heads and head_dim. Prints a table.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popcorn.bench.compare import check  # noqa: E402
from popcorn.core import Case  # noqa: E402
from popcorn.core.inputs import make_inputs  # noqa: E402
from popcorn.kernels import OPS  # noqa: E402

BASE = {"q_heads": 4, "kv_heads": 2, "head_dim": 8, "boundaries": 3, "total": 12}
VARIANTS = [
    ("run 16's case", {}, True),
    ("head_dim 64", {"head_dim": 64}, True),
    ("head_dim 128", {"head_dim": 128}, True),
    ("no GQA (4 over 4)", {"kv_heads": 4}, True),
    ("no GQA, head_dim 64", {"kv_heads": 4, "head_dim": 64}, True),
    ("one sequence", {"boundaries": 2}, True),
    ("8 sequences in 512 tokens", {"boundaries": 9, "total": 512}, True),
    ("8 sequences in 512 tokens, head_dim 64", {"boundaries": 9, "total": 512, "head_dim": 64}, True),
    ("not causal", {}, False),
]


def verdict(name: str, impl: str, dims: dict, args: dict) -> str:
    op = OPS[name]
    case = Case(dims, (), "bfloat16", args, tuple(op.optional))
    backend = op[impl]
    inputs = lambda t: make_inputs(op, case, seed=t, device="cuda")  # noqa: E731
    reason = backend.rejects(inputs(0), True)
    if reason:
        return f"rejected: {reason}"
    try:
        result = check(op.reference, lambda **a: backend.invoke(a), inputs, trials=2, grad=True,
                       out_dtypes=backend.expected_dtypes, frozen=backend.no_grad)
    except Exception as e:  # noqa: BLE001 - a row says it and the table goes on
        return f"raised {type(e).__name__}: {str(e)[:80]}"
    return result.status if result.status == "pass" else f"{result.status}: {result.reason[:110]}"


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'variant':<40} {'attn_varlen fa4':<60} attn fa4 (dense, same heads)")
    for label, change, causal in VARIANTS:
        dims = {**BASE, **change}
        varlen = verdict("attn_varlen", "fa4", dims, {"causal": causal})
        # one batch of the varlen case's whole length (attn's layout: F.scaled_dot_product_attention's)
        dense = verdict("attn", "fa4", {"batch": 1, "q_heads": dims["q_heads"], "kv_heads": dims["kv_heads"],
                                        "seq": dims["total"], "head_dim": dims["head_dim"]}, {"is_causal": causal})
        print(f"{label:<40} {varlen:<60} {dense}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
