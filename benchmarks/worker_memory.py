"""What a fill worker holds on the device between cases, and why.

    python benchmarks/worker_memory.py rms_norm softmax cross_entropy --limit 20

Runs a plan's tasks in this process as one fill worker does (each case's backends in turn, the last one
giving the case back) and prints after every case the device memory the process holds: the allocator's live
tensors (allocated), what it keeps cached (reserved, after ``empty_cache``) and NVML's count for the process
(context, library handles and workspaces included). Reserved far above allocated is fragmentation (a small
live tensor pinning a large segment); NVML far above reserved is memory outside the allocator. Run it with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` to compare. ``--reset-stack`` sets the context's stack limit
to what it is after each case, then to another value and back, printing NVML's count after each: whether
the driver then gives back local memory it grew for kernels that spill (it never shrinks it by itself).
The last columns count the Triton modules the process has loaded (autotuners load every config they try,
and a module stays loaded while its kernel object lives) and the largest local memory a loaded kernel needs
per thread, with what the driver reserves for it (per thread x the SM's threads x SMs): which of the two
grows with NVML's count.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from popcorn.bench.tasks import plan_tasks  # noqa: E402
from popcorn.bench.timing import process_bytes  # noqa: E402
from popcorn.bench.worker import measure_task  # noqa: E402
from popcorn.kernels import OPS  # noqa: E402


def loaded_triton() -> tuple[int, int]:
    """(loaded Triton modules, the largest local memory per thread in bytes among their kernels)."""
    try:
        from triton.compiler.compiler import CompiledKernel
    except ImportError:
        return 0, 0
    with warnings.catch_warnings():  # isinstance on some of torch's deprecated module objects warns
        warnings.simplefilter("ignore")
        ks = [o for o in gc.get_objects() if isinstance(o, CompiledKernel) and getattr(o, "module", None) is not None]
    return len(ks), max((4 * int(getattr(k, "n_spills", 0) or 0) for k in ks), default=0)  # n_spills: local bytes / 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=240, help="stop after this long")
    ap.add_argument("--reset-stack", action="store_true",
                    help="after each case, set CU_LIMIT_STACK_SIZE again, then change it and set it back")
    args = ap.parse_args()
    dev = torch.device("cuda")
    tasks = plan_tasks([OPS[o] for o in args.ops], None, limit=args.limit, device="cuda", out=open(os.devnull, "w"))
    todo = tasks.todo
    gib = 2**30
    print(f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}; {len(todo)} tasks", flush=True)
    props = torch.cuda.get_device_properties(dev)
    threads = props.max_threads_per_multi_processor * props.multi_processor_count
    print(f"{'after':<70} {'status':>7} {'alloc':>6} {'reserv':>6} {'nvml':>6} GiB {'modules':>7} "
          f"{'lmem B':>7} {'x threads':>9} GiB", flush=True)
    t0 = time.monotonic()
    peak = (0, 0, 0)
    for i, task in enumerate(todo):
        if time.monotonic() - t0 > args.seconds:
            break
        last = i + 1 == len(todo) or (todo[i + 1].op, todo[i + 1].case.case_id) != (task.op, task.case.case_id)
        row = measure_task({**task.message(), "last": last}, dev)
        if not last:
            continue
        torch.cuda.empty_cache()
        alloc, reserved = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
        nvml = process_bytes(dev, os.getpid()) or 0
        peak = tuple(max(a, b) for a, b in zip(peak, (alloc, reserved, nvml)))
        reset = ""
        if args.reset_stack:
            cuda, limit = ctypes.CDLL("libcuda.so.1"), ctypes.c_size_t()
            cuda.cuCtxGetLimit(ctypes.byref(limit), 0)  # 0: CU_LIMIT_STACK_SIZE
            same = cuda.cuCtxSetLimit(0, limit)
            after_same = (process_bytes(dev, os.getpid()) or 0) / gib
            # setting the same value may be a no-op to the driver: change it and set it back
            other = cuda.cuCtxSetLimit(0, ctypes.c_size_t(limit.value + 16))
            back = cuda.cuCtxSetLimit(0, limit)
            reset = (f"  stack limit set again (rc {same}): {after_same:6.2f}, changed and set back "
                     f"(rc {other}, {back}): {(process_bytes(dev, os.getpid()) or 0) / gib:6.2f}")
        modules, lmem = loaded_triton()
        print(f"{task.op + ' ' + task.case.label[:60]:<70} {row.get('status', 'error'):>7} {alloc / gib:6.2f} "
              f"{reserved / gib:6.2f} {nvml / gib:6.2f}     {modules:>7} {lmem:>7} {lmem * threads / gib:9.2f}{reset}",
              flush=True)
    print(f"peak between cases (GiB): allocated {peak[0] / gib:.2f}, reserved {peak[1] / gib:.2f}, nvml {peak[2] / gib:.2f}; "
          f"{time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
