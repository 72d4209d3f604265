"""The liger and fla adapters' values on the CPU, through Triton's interpreter (TRITON_INTERPRET=1).

Their predicates decline CPU tensors, so the adapters are called directly, on small cases judged by
the harness exactly as a fill judges them (fp64 truth, gradients included). The interpreter runs in
a subprocess (it must be chosen before a library's kernels are defined), once for every case below;
each test reads its case's verdict. Skipped where Triton or the library is not installed.

Triton's interpreter lacks three things a compiled kernel has, and the subprocess fills them in:
float scalars passed as kernel arguments become fp32 scalars (as a compiled kernel specializes
them), libdevice's rsqrt and tanh (which liger imports) are computed with numpy, and an autotuner
runs each of its configurations once instead of timing them. bfloat16 dot products come out wrong
in the interpreter, so attention is checked in float16.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (op, backend, dtype, scalar args, present optionals[, batch]); None: the op's optionals all present; batch
# (default (3,) where the op has a variadic batch): () is a single row, a 1-D input where the op takes "... dim"
CASES = [
    ("jsd", "liger", "float32", {"beta": 0.5}, None),
    ("jsd", "liger", "float32", {"beta": 0.0}, None),
    ("jsd", "liger", "float32", {"beta": 1.0}, ()),
    ("jsd", "liger", "bfloat16", {"beta": 0.5}, None),
    ("kl_div", "liger", "float32", {"reduction": "batchmean"}, None),
    ("kl_div", "liger", "float32", {"reduction": "sum", "log_target": True}, None),
    ("kl_div", "liger", "float32", {"reduction": "mean"}, None),
    ("kl_div", "liger", "float32", {"reduction": "none", "log_target": True}, None),
    ("kl_div", "liger", "bfloat16", {"reduction": "none"}, None),
    ("linear_cross_entropy", "liger", "float32", {}, None),
    ("linear_cross_entropy", "liger", "float32", {"label_smoothing": 0.1, "reduction": "sum"}, ()),
    ("linear_cross_entropy", "liger", "float32", {"reduction": "none"}, None),
    ("linear_cross_entropy", "fla", "float32", {}, None),
    ("linear_cross_entropy", "fla", "float32", {"label_smoothing": 0.1, "reduction": "sum"}, ()),
    ("group_norm", "liger", "float32", {"num_groups": 4}, None),
    ("group_norm", "liger", "float32", {"num_groups": 8}, ()),
    ("group_norm", "fla", "float32", {"num_groups": 4}, None),
    ("group_norm", "fla", "bfloat16", {"num_groups": 1}, ()),
    ("embedding", "liger", "float32", {}, None),
    ("cross_entropy", "fla", "float32", {}, None),
    ("cross_entropy", "fla", "float32", {"label_smoothing": 0.1, "reduction": "none"}, None),
    ("cross_entropy", "fla", "bfloat16", {"reduction": "sum"}, None),
    ("logsumexp", "fla", "float32", {}, None),
    ("logsumexp", "fla", "bfloat16", {}, None),
    ("logsumexp", "fla", "float32", {}, None, ()),  # fla's own logsumexp_fwd fails on a 1-D x
    ("softmax", "fla", "float32", {}, None),
    ("softmax", "fla", "float16", {}, None),
    ("attn", "fla", "float16", {"is_causal": True}, None),
    ("attn", "fla", "float16", {"is_causal": True, "scale": 0.125}, None),
    ("attn_varlen", "fla", "float16", {"causal": True}, None),
    ("gelu", "fla", "float32", {"approximate": "tanh"}, None),
    ("gelu", "fla", "bfloat16", {"approximate": "tanh"}, None),
]
IDS = [f"{op}-{impl}-{dtype}-" + ",".join(f"{k}={v}" for k, v in args.items()) + ("-bare" if present == () else "")
       + ("-vector" if rest == [()] else "") for op, impl, dtype, args, present, *rest in CASES]
MODULES = {"liger": "liger_kernel", "fla": "fla"}


def _run_all() -> dict:
    """In the interpreter's process: every case's status and reason, keyed by its id."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner

    convert = getattr(interpreter, "_implicit_cvt", None)  # the Triton 3.9 name; others may wrap floats

    def float_as_fp32(arg):
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return convert(arg)

    if convert is not None:
        interpreter._implicit_cvt = float_as_fp32

    def run_once(self):
        def bench(fn, quantiles=None, **_):
            fn()
            return [1.0, 1.0, 1.0] if quantiles else 1.0
        return bench

    Autotuner.do_bench = property(run_once)

    def unary(fn):
        def op(x):
            return tl.tensor(interpreter.TensorHandle(fn(x.handle.data).astype(x.handle.data.dtype), x.handle.dtype),
                             x.type)
        return op

    import importlib


    from popcorn.bench.compare import check
    from popcorn.bench.plan import repair
    from popcorn.core import Case
    from popcorn.core.inputs import make_inputs
    from popcorn.kernels import OPS

    if importlib.util.find_spec("liger_kernel"):
        for name in ("cross_entropy", "fused_add_rms_norm", "geglu", "group_norm", "layer_norm", "rms_norm"):
            module = importlib.import_module(f"liger_kernel.ops.{name}")
            for fn, np_fn in (("rsqrt", lambda a: 1.0 / np.sqrt(a)), ("tanh", np.tanh)):
                if hasattr(module, fn):
                    setattr(module, fn, unary(np_fn))

    dims = {"tokens": 6, "vocab": 24, "hidden": 16, "channels": 16, "width": 4, "batch": 2, "q_heads": 4,
            "kv_heads": 2, "seq": 8, "head_dim": 16, "total": 12, "boundaries": 3}
    results = {}
    for (name, impl, dtype, args, present, *rest), key in zip(CASES, IDS):
        if importlib.util.find_spec(MODULES[impl]) is None:
            continue
        op = OPS[name]
        backend = op[impl]
        names = {n for spec in op.specs.values() for n in spec.names}
        batch = rest[0] if rest else (3,) if any(spec.variadic for spec in op.specs.values()) else ()
        case = repair(op, Case({n: dims[n] for n in names}, batch, dtype, args,
                               tuple(op.optional) if present is None else present))
        grad = not backend.forward_only
        try:
            result = check(op.reference, lambda **a: backend.invoke(a),
                           lambda t: make_inputs(op, case, seed=t, device="cpu"), trials=1, grad=grad,
                           out_dtypes=backend.expected_dtypes, frozen=backend.no_grad)
            results[key] = [result.status, result.reason, bool(result.bwd)]
        except Exception as e:  # noqa: BLE001 - reported by the test of this case
            results[key] = ["raised", f"{type(e).__name__}: {e}", False]
    return results


@pytest.fixture(scope="module")
def verdicts():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: no interpreter")
    if not any(importlib.util.find_spec(m) for m in MODULES.values()):
        pytest.skip("neither liger-kernel nor fla-core is installed")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("key", IDS)
def test_adapter_matches_the_reference_in_the_interpreter(verdicts, key):
    name, impl = CASES[IDS.index(key)][:2]
    if importlib.util.find_spec(MODULES[impl]) is None:
        pytest.skip(f"{MODULES[impl]} is not installed")
    status, reason, checked_grads = verdicts[key]
    assert status == "pass", f"{key}: {status}: {reason}"
    from popcorn.kernels import OPS

    assert checked_grads or OPS[name][impl].forward_only


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(_run_all()))
