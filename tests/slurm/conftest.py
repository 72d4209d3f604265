"""A real single-node Slurm for the session (see cluster.py), and SlurmExecutors pointed at it.

The tests skip only when the Slurm, munge, MariaDB or OpenSSH programs are absent (``.ci/run``
installs them, so CI always runs these tests); a cluster that fails to start is an error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .cluster import LocalSlurm, missing

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster():
    lacking = missing()
    if lacking:
        pytest.skip(f"Slurm is not installed here (missing: {', '.join(lacking)}); .ci/run installs Debian's "
                    "slurm-wlm, slurmdbd, munge, mariadb-server and openssh-server")
    c = LocalSlurm(kill_wait=15)
    with pytest.MonkeyPatch.context() as mp:
        # dagster-slurm's shared ssh connection: a short socket path of our own, gone soon after the tests
        mp.setenv("DAGSTER_SLURM_SSH_CONTROL_DIR", str(c.root / "cm"))
        mp.setenv("DAGSTER_SLURM_SSH_CONTROL_PERSIST", "5s")
        mp.setenv("SLURM_CONF", str(c.conf))
        c.start()
        try:
            yield c
        finally:
            c.stop()


@pytest.fixture(scope="session")
def make_executor(cluster):
    """SlurmExecutor(**overrides) against the local cluster: environments under the cluster's directory,
    overlaying this interpreter's packages (no index needed), tests/ importable in every job."""
    from dagster_slurm import SlurmQueueConfig, SlurmResource

    from orchestration.slurm import SlurmExecutor

    def make(queue: dict | None = None, env: dict | None = None, **overrides) -> SlurmExecutor:
        queue_config = SlurmQueueConfig(**{"partition": "debug", "time_limit": "00:05:00", "cpus": os.cpu_count() or 1,
                                           "mem": None, **(queue or {})})
        slurm = SlurmResource(ssh=cluster.ssh_resource(), queue=queue_config, remote_base=str(cluster.root / "remote"),
                              status_poll_interval_seconds=1.0, status_poll_max_interval_seconds=2.0)
        return SlurmExecutor(slurm=slurm, env_root=str(cluster.root / "envs"), base_python=sys.executable,
                             pip_args=["--no-build-isolation", "--no-index"],
                             env={"PYTHONPATH": str(REPO), "POPCORN_BENCH_TARGET_MS": "2",
                                  "POPCORN_CACHE_DIR": str(cluster.root / "cache"), **(env or {})},
                             **overrides)

    return make
