"""Dispatch overhead: a popcorn op call against calling the chosen implementation directly.

Per op, the median over many calls of (popcorn call - direct call) on small CPU tensors, after
the first call has made and memoized the decision; and the import time of popcorn and the first
op call after torch, in a fresh process. Prints a table.

    python benchmarks/dispatch_overhead.py
    python benchmarks/dispatch_overhead.py --device cuda --backend compile   # on a GPU: rms_norm 8x4096 bf16

On CUDA the calls are not synchronized inside a round, so both sides measure what the host pays
per call (a small kernel's launch), and the difference is dispatch's share.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

from popcorn.core import Float, register_kernel

N, ROUNDS = 500, 41


def overhead_us(direct, wrapped) -> tuple[float, float, float]:
    """(direct us, popcorn us, median of per-round differences): A/B interleaved, so machine noise
    hits both sides alike."""
    a_s, b_s, diffs = [], [], []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(N):
            direct()
        t1 = time.perf_counter()
        for _ in range(N):
            wrapped()
        t2 = time.perf_counter()
        a, b = (t1 - t0) / N * 1e6, (t2 - t1) / N * 1e6
        a_s.append(a)
        b_s.append(b)
        diffs.append(b - a)
    return statistics.median(a_s), statistics.median(b_s), statistics.median(diffs)


def cuda_rows(backend: str) -> None:
    import popcorn
    from popcorn.kernels import rms_norm

    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("op | chosen | direct us | popcorn us | overhead us (median of interleaved rounds)")
    with popcorn.use(backend):
        rms_norm(x, w)  # decide (the scoped preference wins) and compile
        chosen = rms_norm._memo[rms_norm._key(x, w)]  # for compile: the compiled function itself
        torch.cuda.synchronize()
        direct, wrapped, over = overhead_us(lambda: chosen(x, w), lambda: rms_norm(x, w))
    torch.cuda.synchronize()
    print(f"rms_norm 8x4096 bf16 cuda | {backend} | {direct:.2f} | {wrapped:.2f} | {over:.2f}")


def compiled_rows(rms_norm, softmax) -> None:
    """A compiled model calling popcorn against the same model calling the chosen implementation.

    popcorn's call is one opaque custom op whose implementation reads the eager memo (no decision per
    call); the direct model has the implementation traced in. Both are compiled the same way."""
    print("compiled model | backend | direct us | popcorn us | overhead us")
    x, w = torch.randn(8, 256), torch.randn(256)
    for label, op, args in (("rms_norm 8x256 * 2", rms_norm, (x, w)), ("softmax 8x256 * 2", softmax, (x,))):
        op(*args)
        chosen = op._memo[op._key(*args)]
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            direct = torch.compile(lambda *a: chosen(*a) * 2, backend=backend, fullgraph=True)
            wrapped = torch.compile(lambda *a: op(*a) * 2, backend=backend, fullgraph=True)
            direct(*args), wrapped(*args)
            d, p, over = overhead_us(lambda: direct(*args), lambda: wrapped(*args))
            print(f"{label} | {backend} | {d:.2f} | {p:.2f} | {over:.2f}")


def main() -> None:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default="compile", help="on CUDA: the backend to call directly and through popcorn")
    a = p.parse_args()
    torch.set_num_threads(1)  # intra-op thread hand-offs add microseconds of noise to tiny kernels
    if a.device == "cuda":
        cuda_rows(a.backend)
        return
    from popcorn.kernels import gelu, rms_norm, softmax, swiglu

    @register_kernel(compile=False)
    def identity(x: Float["... hidden"], w: Float["hidden"]) -> Float["... hidden"]:
        """Return x: a kernel that costs nothing, so the table's first row is the dispatch cost alone.

        $$y = x$$
        """
        return x

    identity.enable_library()  # the same call path as catalog ops, compile check included
    x = torch.randn(8, 16)  # small: the kernel's own time and noise stay small beside the overhead
    cases = {
        "identity (no kernel) 8x16": (identity, (x, torch.randn(16)), {}),
        "rms_norm 8x16": (rms_norm, (x, torch.randn(16)), {}),
        "rms_norm 8x256 (the anchor's ~120 us case)": (rms_norm, (torch.randn(8, 256), torch.randn(256)), {}),
        "softmax 8x16": (softmax, (x,), {}),
        "swiglu 8x16": (swiglu, (x, torch.randn(8, 16)), {}),
        "gelu 8x16 tanh": (gelu, (x,), {"approximate": "tanh"}),
    }
    print("op | chosen | direct us | popcorn us | overhead us (median of interleaved rounds) | floor us")
    for label, (op, args, kwargs) in cases.items():
        op(*args, **kwargs)  # decide and memoize
        chosen = op._memo[op._key(*args, **kwargs)]
        direct, wrapped, over = overhead_us(lambda: chosen(*args, **kwargs), lambda: op(*args, **kwargs))
        # floor: the direct call plus computing the memo key alone (reading the tensors' attributes), which
        # any dispatcher pays; beside a multi-kernel eager op those reads cost more than in a tight loop
        _, _, floor = overhead_us(lambda: chosen(*args, **kwargs),
                                  lambda: (op._key(*args, **kwargs), chosen(*args, **kwargs)))
        name = next(n for n, i in op.implementations.items() if i.fn is chosen)
        print(f"{label} | {name} | {direct:.2f} | {wrapped:.2f} | {over:.2f} | {floor:.2f}")

    compiled_rows(rms_norm, softmax)

    code = ("import time, torch; t = time.perf_counter(); import popcorn; from popcorn.kernels import rms_norm; "
            "rms_norm(torch.randn(8, 256), torch.randn(256)); dt = time.perf_counter() - t; import sys; "
            "heavy = [m for m in ('pyarrow', 'triton', 'dagster', 'deltalake', 'streamlit') if m in sys.modules]; "
            "print(f'{dt:.3f} {heavy}')")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split(maxsplit=1)
            for _ in range(5)]
    times = sorted(float(r[0]) for r in runs)
    print(f"import popcorn + first rms_norm after torch: median {statistics.median(times):.3f} s "
          f"(min {times[0]:.3f}, max {times[-1]:.3f}); heavy modules loaded: {runs[0][1].strip()}")


if __name__ == "__main__":
    main()
