"""Ops for fill tests: backends that die, hang or run out of memory on chosen cases.

The fill worker imports this module by name (tests/ is on sys.path), like any kernel module.
"""

import os
import signal
import time

import torch

from popcorn.core import Backend, Float, declare_backend, register_kernel

declare_backend(Backend("toy", None))

# toy_scale along hidden, two rows, float32: the fill tests' slice
SLICE = ["hidden", "dtype=float32", "...=[2]", "alpha=2.0"]


@register_kernel(compile=False)
def toy_scale(x: Float["... hidden"], alpha: float = 2.0) -> Float["... hidden"]:
    """Scale by alpha.

    $$y = \\alpha x$$
    """
    return alpha * x


@toy_scale.register("toy:good")
def toy_good(x, alpha):
    return x * alpha


@toy_scale.register("toy:die")
def toy_die(x, alpha):
    if x.shape[-1] == int(os.environ.get("TOY_DIE_AT", "17")):
        os.kill(os.getpid(), signal.SIGKILL)
    return x * alpha


@toy_scale.register("toy:hang")
def toy_hang(x, alpha):
    if x.shape[-1] == int(os.environ.get("TOY_HANG_AT", "33")):
        time.sleep(3600)
    return x * alpha


@toy_scale.register("toy:oom")
def toy_oom(x, alpha):
    if x.shape[-1] >= int(os.environ.get("TOY_OOM_FROM", "64")):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")
    return x * alpha


@toy_scale.register("toy:oom_until")
def toy_oom_until(x, alpha):
    """Out of memory at sizes from TOY_OOM_FROM until the file TOY_OOM_UNTIL exists: a case that ran out of
    what other cases held, and fits once they are gone."""
    if x.shape[-1] >= int(os.environ.get("TOY_OOM_FROM", "64")) and not os.path.exists(os.environ["TOY_OOM_UNTIL"]):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")
    return x * alpha


# admits alpha=3.0 only: every planned case (alpha=2.0) is gated at plan time
toy_scale.register("toy:gated", lambda x, alpha: x * alpha, gates={"alpha": (3.0,)})
# no backward: measured forward only on the plan's gradient cases
toy_scale.register("toy:fwd", lambda x, alpha: (x * alpha).detach(), forward_only=True)


@toy_scale.register("toy:die_together")
def toy_die_together(x, alpha):
    """Dies at the two sizes in TOY_DIE_TOGETHER, each only once both have arrived (a parallel fill's two
    workers die at once)."""
    sizes = [int(n) for n in os.environ.get("TOY_DIE_TOGETHER", "17,21").split(",")]
    if x.shape[-1] in sizes:
        meet = os.environ["TOY_MEET_DIR"]
        open(os.path.join(meet, f"{x.shape[-1]}"), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(meet)) < len(sizes) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * alpha


@toy_scale.register("toy:lanes")
def toy_lanes(x, alpha):
    """Logs (pid, lane held, start, end, cores it may run on) of each call to TOY_LANE_LOG: which device lane
    the call ran in, on which cores."""
    from popcorn.bench import lane

    t0 = time.monotonic()
    time.sleep(0.02 if lane.held == lane.SHARED else 0.0005)  # trials long enough to overlap timing, were lanes not kept
    cores = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    with open(os.environ["TOY_LANE_LOG"], "a") as f:
        f.write(f"{os.getpid()} {lane.held} {t0} {time.monotonic()} {cores}\n")
    return x * alpha


@register_kernel(compile=False)
def toy_counted(x: Float["... hidden"]) -> Float["... hidden"]:
    """Doubles; each fp64 call (the truth) appends a line to TOY_TRUTH_LOG.

    $$y = 2x$$
    """
    if x.dtype == torch.float64 and os.environ.get("TOY_TRUTH_LOG"):
        with open(os.environ["TOY_TRUTH_LOG"], "a") as f:
            f.write(f"{'x'.join(map(str, x.shape))}\n")
    return 2 * x


toy_counted.register("toy:one", lambda x: x * 2)
toy_counted.register("toy:two", lambda x: x + x)



@toy_scale.register("toy:slow")
def toy_slow(x, alpha):
    """Sleeps TOY_SLOW_S (default 0.05) on every call: a fill that takes a while per case, for stopping
    one mid-partition; with TOY_SLOW_JOBS=N, only in a partition's first N Slurm jobs (the SlurmExecutor
    sets POPCORN_SLURM_ATTEMPT). (State kept across calls would change the implementation's fingerprint.)"""
    jobs = os.environ.get("TOY_SLOW_JOBS")
    if not jobs or int(os.environ.get("POPCORN_SLURM_ATTEMPT", "1")) <= int(jobs):
        time.sleep(float(os.environ.get("TOY_SLOW_S", "0.05")))
    return x * alpha
