"""Probe: does the correctness check change what torch.compile produces for a few-row, long-row softmax?

Times softmax's compile backend on (4, 50257) fp32 (a) straight away and (b) after a harness
check(), each in a fresh process. Equal times mean the check leaves the timed artifact alone.

    python benchmarks/compile_probe.py
"""

import subprocess
import sys

CODE = """
import sys, torch
from popcorn.kernels import softmax
from popcorn.bench.compare import check
from popcorn.bench.timing import measure
x = torch.randn(4, 50257, device="cuda")
impl = softmax["compile"]
if sys.argv[1] == "after-check":
    r = check(softmax.reference, lambda **a: impl.invoke(a), lambda t: {"x": torch.randn(4, 50257, device="cuda")},
              trials=3, grad=False)
    assert r.status == "pass", r.reason
t, timer = measure(lambda **a: impl.invoke(a), {"x": x}, False, torch.device("cuda"))
ref, _ = measure(lambda **a: softmax.reference(**a), {"x": x}, False, torch.device("cuda"))
print(f"{sys.argv[1]:<12} compile fwd {t['fwd_ms']:.4f} ms ({timer}), torch fwd {ref['fwd_ms']:.4f} ms")
"""

for mode in ("direct", "after-check"):
    out = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True)
    print(out.stdout.strip() or out.stderr[-2000:])
