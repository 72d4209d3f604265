"""A real single-node Slurm for tests, started by hand and stopped cleanly: munged, MariaDB, slurmdbd,
slurmctld, slurmd and an sshd on 127.0.0.1 (dagster-slurm reaches a cluster through SSH).

Everything lives in one temporary directory: its own munge key and socket, a MariaDB data directory,
``slurm.conf`` (found through ``SLURM_CONF``, so the machine's ``/etc/slurm`` is never touched), free
ports for every daemon, and an sshd with its own host and client keys. No systemd: each daemon runs in
the foreground as a child of this process and is stopped by its pid. Needs root or passwordless sudo
(slurmd launches jobs; sshd authenticates); ``.ci/run`` installs the Debian packages.

``python -m tests.slurm.cluster`` starts one and waits, for trying things by hand.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

# the Debian packages .ci/run installs: slurm-wlm (slurmctld, slurmd, slurm-client), slurmdbd, munge,
# mariadb-server, openssh-server
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sshd")
CLIENTS = ("sbatch", "squeue", "sacct", "sacctmgr", "scontrol", "sinfo", "mariadb-install-db", "ssh", "ssh-keygen")


def missing() -> list[str]:
    """The programs a local Slurm needs that this machine lacks (daemons live in /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [p for p in DAEMONS + CLIENTS if shutil.which(p, path=path) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sbin(name: str) -> str:
    return shutil.which(name, path=os.pathsep.join(["/usr/sbin", "/sbin", os.environ.get("PATH", "")])) or name


class LocalSlurm:
    """One node, one partition (``debug``), accounting through slurmdbd so ``sacct`` answers at once."""

    CLUSTER = "popcorn"

    def __init__(self, root: Path | None = None, kill_wait: int = 10):
        # short: munge and MariaDB sockets live here, and a unix socket path has at most 107 bytes
        self.owns_root = root is None  # a directory of its own is removed on stop
        self.root = Path(root or tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
        self.kill_wait = kill_wait
        self.host = socket.gethostname().split(".")[0]
        self.user = getpass.getuser()
        self.sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports = {k: _free_port() for k in ("ctld", "slurmd", "dbd", "db", "ssh")}
        self.conf = self.root / "etc" / "slurm.conf"
        self.ssh_dir = self.root / "ssh"
        self.client_key = self.ssh_dir / "client"
        self.known_hosts = self.ssh_dir / "known_hosts"

    # -- environment for clients -----------------------------------------------------------------

    @property
    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> str:
        out = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and out.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stdout}{out.stderr}")
        return out.stdout

    def ssh_resource(self):
        from dagster_slurm import SSHConnectionResource

        return SSHConnectionResource(host="127.0.0.1", port=self.ports["ssh"], user=self.user,
                                     key_path=str(self.client_key), host_key_checking="strict",
                                     known_hosts_file=str(self.known_hosts))

    # -- start and stop --------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> "LocalSlurm":
        try:
            self._write_configs()
            self._start_munge()
            self._start_mariadb()
            self._start("slurmdbd", [_sbin("slurmdbd"), "-D"])
            self._wait(self._sacctmgr_ok, 60, "slurmdbd to answer sacctmgr")
            self.run("sacctmgr", "-i", "add", "cluster", self.CLUSTER, check=False)
            self._start("slurmctld", [_sbin("slurmctld"), "-D", "-i"])
            self._start("slurmd", [_sbin("slurmd"), "-D", "-N", self.host])
            self._wait(lambda: self.run("sinfo", "-h", "-o", "%T", check=False).strip() == "idle", timeout,
                       "the node to be idle in sinfo")
            self._start_sshd()
            self._wait(self._ssh_ok, 30, "sshd to accept the client key")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel the jobs left in the queue, close the ssh ControlMasters opened against this cluster
        (dagster-slurm keeps one per host, and its sessions outlive sshd's listener), stop every daemon by
        its pid, the last started first (SIGTERM, then SIGKILL after 10 s), and remove the directory it made."""
        if "slurmctld" in self.procs:  # a test that failed mid-job leaves no job processes behind
            try:
                self.run("scancel", "--full", "--user", self.user, check=False, timeout=20)
                self._wait(lambda: not self.run("squeue", "-h", check=False, timeout=20).strip(), 30, "jobs to end")
            except RuntimeError:
                pass
        for socket_path in (self.root / "cm").glob("*"):
            subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket_path}", "x"], capture_output=True,
                           timeout=10)
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                self._signal(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    self._signal(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        if self.owns_root:
            subprocess.run([*self.sudo, "rm", "-rf", str(self.root)], capture_output=True, timeout=60)

    def logs(self) -> str:
        """The tail of each daemon's log, for a failure message."""
        parts = []
        for f in sorted((self.root / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-15:]
            parts.append(f"== {f.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # -- pieces ----------------------------------------------------------------------------------

    def _signal(self, pid: int, sig: int) -> None:
        if self.sudo:
            subprocess.run([*self.sudo, "kill", f"-{int(sig)}", str(pid)], capture_output=True)
        else:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen([*self.sudo, *cmd], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        time.sleep(0.2)
        if self.procs[name].poll() is not None:
            raise RuntimeError(f"{name} exited at once ({self.procs[name].returncode}):\n{self.logs()}")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} died ({proc.returncode}) waiting for {what}:\n{self.logs()}")
            try:
                if ready():
                    return
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.logs()}")

    def _sacctmgr_ok(self) -> bool:
        out = subprocess.run(["sacctmgr", "-n", "list", "cluster"], env=self.env, capture_output=True, text=True,
                             timeout=20)
        return out.returncode == 0

    def _ssh_ok(self) -> bool:
        out = subprocess.run(["ssh", "-p", str(self.ports["ssh"]), "-i", str(self.client_key), "-o", "BatchMode=yes",
                              "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                              f"{self.user}@127.0.0.1", "sinfo -h -o %T"], capture_output=True, text=True, timeout=20)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def _write_configs(self) -> None:
        r = self.root
        for d in ("etc", "log", "run", "spool/slurmd", "spool/slurmctld", "munge", "db", "ssh"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o755)  # jobs of a non-root user read the config under it
        munge_socket = r / "munge" / "munge.socket"
        auth = f"AuthType=auth/munge\nAuthInfo=socket={munge_socket}\n"
        mem = _real_memory()
        (r / "etc" / "plugstack.conf").write_text("")  # no SPANK plugins (the machine's pyxis, if any)
        self.conf.write_text(f"""ClusterName={self.CLUSTER}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={self.ports['ctld']}
SlurmdPort={self.ports['slurmd']}
{auth}CryptoType=crypto/munge
PlugStackConfig={r}/etc/plugstack.conf
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.ports['dbd']}
AccountingStoragePass={munge_socket}
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmdSpoolDir={r}/spool/slurmd
StateSaveLocation={r}/spool/slurmctld
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
KillWait={self.kill_wait}
OverTimeLimit=0
InactiveLimit=0
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory={mem} State=UNKNOWN
PartitionName=debug Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        dbd = r / "etc" / "slurmdbd.conf"
        dbd.write_text(f"""{auth}DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.ports['dbd']}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.ports['db']}
StorageLoc=slurm_acct_db
StorageUser=root
StoragePass=popcorn
LogFile={r}/log/slurmdbd.log
PidFile={r}/run/slurmdbd.pid
""")
        os.chmod(dbd, 0o600)  # slurmdbd refuses a config others can read

    def _start_munge(self) -> None:
        d = self.root / "munge"
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        os.chmod(d, 0o755)
        self._start("munged", [_sbin("munged"), "-F", "--force", f"--socket={d}/munge.socket",
                               f"--key-file={key}", f"--pid-file={d}/munged.pid", f"--log-file={self.root}/log/munged.log",
                               f"--seed-file={d}/munged.seed"])
        self._wait(lambda: (d / "munge.socket").exists(), 20, "munged's socket")

    def _start_mariadb(self) -> None:
        data = self.root / "db"
        subprocess.run([*self.sudo, "mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={data}",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=120)
        # grant tables skipped: slurmdbd logs in as anyone and creates its own database
        self._start("mariadbd", [_sbin("mariadbd"), "--no-defaults", "--user=root", f"--datadir={data}",
                                 f"--socket={self.root}/run/mysql.sock", f"--port={self.ports['db']}",
                                 "--bind-address=127.0.0.1", "--skip-grant-tables",
                                 f"--pid-file={self.root}/run/mariadb.pid", f"--log-error={self.root}/log/mariadb.log"])
        self._wait(lambda: _port_open(self.ports["db"]), 60, "MariaDB to listen")

    def _start_sshd(self) -> None:
        d = self.ssh_dir
        for name in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
        shutil.copy(d / "client.pub", d / "authorized_keys")
        host_key = (d / "host.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.ports['ssh']} {host_key[0]} {host_key[1]}\n")
        (d / "sshd_config").write_text(f"""Port {self.ports['ssh']}
ListenAddress 127.0.0.1
HostKey {d}/host
PidFile {self.root}/run/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
MaxStartups 50
SetEnv SLURM_CONF={self.conf}
Subsystem sftp internal-sftp
""")
        subprocess.run([*self.sudo, "mkdir", "-p", "/run/sshd"], check=True)  # sshd's privilege separation dir
        self._start("sshd", [_sbin("sshd"), "-D", "-e", "-f", str(d / "sshd_config")])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _real_memory() -> int:
    """MiB slurmd may offer: half the machine's memory (more than the real value drains the node)."""
    try:
        kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
        return max(500, kb // 1024 // 2)
    except (OSError, StopIteration, ValueError):
        return 1000


if __name__ == "__main__":
    cluster = LocalSlurm().start()
    print(f"SLURM_CONF={cluster.conf}\nssh -p {cluster.ports['ssh']} -i {cluster.client_key} "
          f"-o UserKnownHostsFile={cluster.known_hosts} {cluster.user}@127.0.0.1\nCtrl-C stops it")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
