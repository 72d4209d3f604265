"""The payload of a partition's Slurm job (dagster-slurm uploads this file and runs it with the job's
Python): runs the partition's ``popcorn bench fill`` as a child process, streams its output to the
Dagster run log through Pipes, keeps the whole output and the outcome beside the shard
(``<out_dir>/.slurm/<job id>.log`` and ``.json``), and hands a walltime's SIGTERM to the fill, which
drains: it writes every finished row and stops at the case in flight.

It needs the standard library and dagster-pipes alone: the job's environment need not hold dagster.
Its Pipes extras (set by :class:`orchestration.slurm.SlurmExecutor`): ``argv`` (the fill's command;
its interpreter is replaced by ``python``, default this one), ``prefix`` (put before it, e.g. an
``srun --container-image`` step) and ``out_dir``.
"""

from __future__ import annotations

import codecs
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dagster_pipes import open_dagster_pipes

PROGRESS_EVERY_S = 15.0  # the fill's progress line is rewritten per pair; the run log gets one this often


def main() -> int:
    with open_dagster_pipes() as pipes:
        extras = pipes.extras
        job_id = os.environ.get("SLURM_JOB_ID", "nojob")
        argv = [*extras.get("prefix", []), extras.get("python") or sys.executable, *extras["argv"][1:]]
        logs = Path(extras["out_dir"]) / ".slurm"
        logs.mkdir(parents=True, exist_ok=True)
        pipes.log.info(f"Slurm job {job_id} on {socket.gethostname()}: {shlex.join(argv)}")
        signals: list[int] = []
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def drain(signum, frame):
            # Slurm signals every process of the job at its walltime (the fill too); this covers a
            # signal sent to the batch shell alone (sbatch --signal=B:..., scancel --batch). The fill
            # takes the first SIGTERM and ignores the rest.
            signals.append(signum)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, drain)
        signal.signal(signal.SIGINT, drain)
        with open(logs / f"{job_id}.log", "wb") as log:
            stream(proc, log, pipes.log)
        code = proc.wait()
        outcome = {"job_id": job_id, "returncode": code, "signals": signals, "host": socket.gethostname(),
                   "argv": argv}
        tmp = logs / f".{job_id}.json.tmp"
        tmp.write_text(json.dumps(outcome))
        os.replace(tmp, logs / f"{job_id}.json")
        if signals:
            pipes.log.warning(f"the fill was told to stop (signal {signals[0]}) and exited with {code}; "
                              "every finished row is in the shard, resubmitting measures the rest")
        pipes.report_custom_message(outcome)
    return code


def stream(proc: subprocess.Popen, log, out) -> None:
    """Copy the fill's output to ``log`` as it comes and to ``out`` (the Pipes logger) line by line;
    the progress line (rewritten with carriage returns) goes out every PROGRESS_EVERY_S and at its end."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text, after_cr, last_progress = "", False, 0.0
    fd = proc.stdout.fileno()
    while True:
        chunk = os.read(fd, 65536)
        log.write(chunk)
        log.flush()
        text += decoder.decode(chunk, final=not chunk)
        while True:
            cut = min((i for i in (text.find("\r"), text.find("\n")) if i >= 0), default=-1)
            if cut < 0:
                break
            segment, sep, text = text[:cut].rstrip(), text[cut], text[cut + 1:]
            if segment and not after_cr:
                out.info(segment)
            elif segment and (sep == "\n" or time.monotonic() - last_progress >= PROGRESS_EVERY_S):
                out.info(segment)
                last_progress = time.monotonic()
            after_cr = sep == "\r"
        if not chunk:
            if text.strip():
                out.info(text.strip())
            return


if __name__ == "__main__":
    sys.exit(main())
