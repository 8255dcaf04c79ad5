"""A private one-node Slurm for the test suite: munged, slurmctld and slurmd, started and stopped by us.

The Slurm backend has to be tested against a real Slurm, and CI is a fresh Debian machine, so the
tests bring their own: Debian's slurm-wlm and munge packages, a slurm.conf written here, and
everything (config, munge key and socket, state, spool, pids, logs) in one private directory under
/tmp. Clients find it through SLURM_CONF, so nothing in /etc is touched and a Slurm that is already
running on the machine is neither used nor disturbed. The ports are picked free, so two test
sessions on one machine (a developer's and a clean-clone CI check) do not clash.

Where no Slurm can be started (packages missing, not root, the host name does not resolve, a daemon
fails), `start()` raises SlurmUnavailable with a reason the tests skip with.

conftest.py drives this: `ensure_started()` once per session (before nbval starts notebook kernels,
which inherit SLURM_CONF), `shutdown()` at the end, `skip_reason()` for tests that want to know why.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import portpicker

OPT_OUT_ENV = "KWNB_TEST_SLURM"  # "0": never start Slurm; "1": start it even if no collected test asks
REASON_ENV = "KWNB_TEST_SLURM_SKIP"  # set for notebooks (which cannot pytest.skip) when there is no Slurm
PARTITION = "debug"
START_SECONDS = 30.0
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol", "sdiag")
# squeue -o %T names; a job in one of these states is over (squeue keeps showing it for MinJobAge).
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
# Daemons live in /usr/sbin, which a non-login root shell or a venv'd PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])

SLURM_CONF = """\
# Written by tests/slurm_support.py for one pytest session; removed with this directory at its end.
ClusterName=kwnb-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# Listen on 127.0.0.1 only, not on every interface.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged, not the system's /run/munge socket.
AuthInfo=socket={munge_socket}
StateSaveLocation={work}/ctld-state
SlurmdSpoolDir={work}/slurmd-spool
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={work}/plugstack.conf
MpiDefault=none
MailProg=/bin/true
# No systemd, no cgroup setup: track processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Short jobs end promptly and a finished job stays visible to squeue for a minute (no accounting).
MinJobAge=60
KillWait=5
InactiveLimit=0
SlurmdTimeout=30
SlurmctldTimeout=30
MessageTimeout=10
ReturnToService=2
# Start a submitted job at once, not at the next scheduling pass (up to 3 s later by default).
SchedulerParameters=batch_sched_delay=0
NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} {layout} State=UNKNOWN
PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmUnavailable(Exception):
    """No Slurm could be started here; the message says why (it becomes the tests' skip reason)."""


@dataclass
class SlurmCluster:
    """A running private Slurm: what tests need to submit to it, and the daemons to stop."""

    workdir: Path
    conf: Path
    node: str
    partition: str
    cpus: int
    version: str
    ports: tuple[int, int]
    started_seconds: float = 0.0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def env(self) -> dict[str, str]:
        """os.environ with SLURM_CONF pointing at this cluster and the daemons' directories on PATH."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}

    def run(self, *args: str, timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm client (`run("sinfo", "-h")`) against this cluster; text output, never raises on exit code."""
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs)

    def job_state(self, job_id: str) -> str | None:
        """The job's state as squeue names it (RUNNING, COMPLETED, ...), or None once Slurm has forgotten it.

        `-t all`: without it, squeue -j prints nothing at all for a finished job (Slurm 22.05).
        """
        result = self.run("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T")
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return None
            raise RuntimeError(f"squeue -j {job_id} failed: {result.stderr.strip()}")
        return result.stdout.strip() or None

    def wait_job(self, job_id: str, timeout: float = 30, interval: float = 0.2) -> str | None:
        """Poll squeue until the job is over; returns its final state (None if already forgotten).

        Not `sbatch --wait`: it polls with a growing back-off and returns seconds late.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state is None or state in FINISHED_STATES:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f} s")
            time.sleep(interval)

    def log_tail(self, daemon: str, lines: int = 15) -> str:
        """The last lines a daemon wrote. In the foreground (-D, -F) all of them log to stderr, which
        we keep in <daemon>.out: that includes errors from before a log file is opened."""
        for path in (self.workdir / f"{daemon}.out", self.workdir / f"{daemon}.log"):
            text = path.read_text(errors="replace").strip() if path.exists() else ""
            if text:
                return "\n".join(text.splitlines()[-lines:])
        return "(it wrote nothing)"

    def stop(self) -> None:
        """Cancel our jobs, stop the daemons we started (by pid, newest first) and remove the directory."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self._cancel_jobs()
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is not None:
                _stop_process(proc)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _cancel_jobs(self, timeout: float = 15) -> None:
        """Jobs still running at the end would leave slurmstepd and their processes behind slurmd."""
        try:
            self.run("scancel", "-p", self.partition, timeout=10)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                active = self.run("squeue", "-h", "-t", "PD,CF,R,S,CG", "-o", "%i", timeout=10)
                if active.returncode != 0 or not active.stdout.strip():
                    return
                time.sleep(0.2)
        except subprocess.TimeoutExpired:
            pass


def _stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL: only this pid, which we started (other Slurms may run on the machine)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def _which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


def check_prerequisites() -> str:
    """The node name (short host name) if this machine can run Slurm, else SlurmUnavailable saying why."""
    missing = [name for name in (*DAEMONS, *CLIENTS, "setpriv") if not _which(name)]
    if missing:
        raise SlurmUnavailable(f"Slurm is not installed here ({', '.join(missing)} not found); "
                               f"on Debian: apt-get install --no-install-recommends slurm-wlm munge")
    if os.geteuid() != 0:
        raise SlurmUnavailable("not root: slurmd must run as root to start jobs, and munged as the munge user")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        raise SlurmUnavailable("there is no 'munge' user for munged to run as (the munge package creates it)")
    node = socket.gethostname().split(".")[0]
    try:
        address = socket.gethostbyname(node)
    except OSError as error:
        raise SlurmUnavailable(f"the host name {node!r} does not resolve ({error}); Slurm and the TensorFlow "
                               f"workers address the node by it: add it to /etc/hosts") from None
    try:  # slurmd binds to the node's address (NoInAddrAny): it must be one of this machine's
        with socket.socket() as probe:
            probe.bind((address, 0))
    except OSError as error:
        raise SlurmUnavailable(f"the host name {node!r} resolves to {address}, which is not an address of "
                               f"this machine ({error})") from None
    return node


def node_layout(slurmd: str) -> tuple[str, int]:
    """The node's CPUs, sockets, cores, threads and memory as `slurmd -C` sees them, and its CPU count.

    slurmd drains a node whose configuration promises more than it finds, so take its own view.
    """
    result = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30)
    first = result.stdout.splitlines()[0] if result.stdout.strip() else ""
    fields = dict(item.split("=", 1) for item in first.split() if "=" in item)
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    if result.returncode != 0 or "CPUs" not in fields:
        raise SlurmUnavailable(f"slurmd -C did not describe the node: {(result.stderr or result.stdout).strip()}")
    return " ".join(f"{key}={fields[key]}" for key in keys if key in fields), int(fields["CPUs"])


def _munge_dir(work: Path) -> tuple[Path, Path]:
    """munged refuses a key or directories it does not own, or that others may write: give it its own."""
    munge = pwd.getpwnam("munge")
    mdir = work / "munge"
    mdir.mkdir(mode=0o711)
    os.chown(mdir, munge.pw_uid, munge.pw_gid)
    os.chmod(mdir, 0o711)  # not 0700: clients (root here, but not necessarily) must reach the socket
    key = mdir / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as out:
        out.write(os.urandom(1024))
    os.chown(key, munge.pw_uid, munge.pw_gid)
    return mdir, key


def _spawn(name: str, argv: list[str], work: Path, env: dict, user: str | None = None) -> subprocess.Popen:
    """Start a daemon in the foreground as our child, so we hold its pid and nothing else.

    setpriv --pdeathsig: if pytest dies without cleaning up (kill -9), the daemon is told to stop too.
    Its own session, so a Ctrl-C meant for pytest reaches pytest, which then stops it in order.
    """
    prefix = [_which("setpriv"), "--pdeathsig", "TERM"]
    if user:
        prefix += ["--reuid", user, "--regid", user, "--init-groups"]
    out = open(work / f"{name}.out", "wb")
    try:
        return subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=work, start_new_session=True)
    finally:
        out.close()


def _wait_for(what: str, ready, cluster: SlurmCluster, daemon: str, deadline: float) -> None:
    """Poll ready() until true; fail naming the daemon and its last log lines if it died or the time ran out."""
    proc = cluster.procs[daemon]
    while True:
        if ready():
            return
        if proc.poll() is not None:
            raise SlurmUnavailable(f"{daemon} exited with code {proc.returncode} before {what}; its last lines:\n"
                                   + cluster.log_tail(daemon))
        if time.monotonic() > deadline:
            raise SlurmUnavailable(f"{what} not within {START_SECONDS:.0f} s; {daemon}'s last lines:\n"
                                   + cluster.log_tail(daemon))
        time.sleep(0.1)


def _pick_ports() -> tuple[int, int]:
    first = portpicker.pick_unused_port()
    second = portpicker.pick_unused_port()
    while second == first:
        second = portpicker.pick_unused_port()
    return first, second


def start(partition: str = PARTITION, timeout: float = START_SECONDS) -> SlurmCluster:
    """Start munged, slurmctld and slurmd and wait until the node is idle; stop all of it on any failure."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    node = check_prerequisites()
    slurmd = _which("slurmd")
    layout, cpus = node_layout(slurmd)
    version = subprocess.run([slurmd, "-V"], capture_output=True, text=True, timeout=30).stdout.strip()
    # /tmp explicitly: munged checks every parent of its key for group/world write (sticky /tmp passes),
    # and the munge socket path must stay short (108 bytes). 0711 so the munge user can pass through.
    work = Path(tempfile.mkdtemp(prefix="kwnb-slurm-", dir="/tmp"))
    os.chmod(work, 0o711)
    cluster = SlurmCluster(workdir=work, conf=work / "slurm.conf", node=node, partition=partition, cpus=cpus,
                           version=version, ports=_pick_ports())
    try:
        mdir, key = _munge_dir(work)
        socket_path = mdir / "munge.socket"
        for sub in ("ctld-state", "slurmd-spool"):
            (work / sub).mkdir(mode=0o700)
        (work / "plugstack.conf").write_text("")  # not Debian's /etc/slurm one: no SPANK plugins
        cluster.conf.write_text(SLURM_CONF.format(
            node=node, ctld_port=cluster.ports[0], slurmd_port=cluster.ports[1], munge_socket=socket_path,
            work=work, layout=layout, partition=partition))
        env = cluster.env

        cluster.procs["munged"] = _spawn("munged", [
            _which("munged"), "--foreground", f"--key-file={key}", f"--socket={socket_path}",
            f"--pid-file={mdir / 'munged.pid'}", f"--seed-file={mdir / 'munged.seed'}", "--num-threads=2"], work, env, user="munge")
        _wait_for("its socket appeared", socket_path.exists, cluster, "munged", deadline)

        cluster.procs["slurmctld"] = _spawn("slurmctld", [
            _which("slurmctld"), "-D", "-c", "-f", str(cluster.conf)], work, env)
        _wait_for("it answered scontrol ping",
                  lambda: "is UP" in cluster.run("scontrol", "ping", timeout=10).stdout, cluster, "slurmctld",
                  deadline)

        cluster.procs["slurmd"] = _spawn("slurmd", [slurmd, "-D", "-N", node, "-f", str(cluster.conf)], work, env)
        _wait_for(f"node {node} was idle in partition {partition}",
                  lambda: _node_state(cluster) == "idle", cluster, "slurmd", deadline)
        # slurmctld's scheduler first runs about 3 s after it starts; a job submitted before then waits
        # for it. Waiting here keeps every job's turnaround the same (about half a second).
        _wait_for("its scheduler had run once", lambda: _scheduler_cycles(cluster) > 0, cluster, "slurmctld",
                  deadline)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_seconds = time.monotonic() - t0
    return cluster


def _scheduler_cycles(cluster: SlurmCluster) -> int:
    found = re.search(r"Main schedule statistics.*?Total cycles:\s*(\d+)", cluster.run("sdiag", timeout=10).stdout,
                      re.S)
    return int(found.group(1)) if found else 0


def _node_state(cluster: SlurmCluster) -> str:
    result = cluster.run("sinfo", "-h", "-p", cluster.partition, "-n", cluster.node, "-o", "%t", timeout=10)
    return result.stdout.strip() if result.returncode == 0 else ""


# ---- one cluster per pytest session (conftest.py calls these) ----

_cluster: SlurmCluster | None = None
_reason: str | None = "Slurm was not started in this session (no collected test asked for it)"
_saved_env: dict[str, str | None] = {}
_attempted = False
summary: str | None = None  # one line for the end of the pytest report: what ran, or why nothing did


def _setting() -> str:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower()


def opted_out() -> bool:
    return _setting() in ("0", "no", "false", "off")


def forced() -> bool:
    return _setting() in ("1", "yes", "true", "on")


def _set_env(name: str, value: str | None) -> None:
    """Set (or unset) a variable for this process and the kernels it starts; shutdown() puts it back."""
    _saved_env.setdefault(name, os.environ.get(name))
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def ensure_started() -> SlurmCluster | None:
    """Start the session's cluster once and export SLURM_CONF; on failure remember why (and export that).

    A SLURM_CONF already in the environment (a developer's own Slurm) is overridden for the session:
    the tests assume an idle node and a partition of their own, which a shared cluster cannot promise.
    """
    global _cluster, _reason, _attempted, summary
    if _attempted:
        return _cluster
    _attempted = True
    if opted_out():
        _reason = f"{OPT_OUT_ENV}=0: the test Slurm was switched off"
    else:
        try:
            _cluster = start()
        except SlurmUnavailable as error:
            _reason = str(error)
        except (OSError, subprocess.SubprocessError) as error:
            _reason = f"the test Slurm could not be started: {type(error).__name__}: {error}"
        else:
            _reason = None
            summary = (f"{_cluster.version}: node {_cluster.node} ({_cluster.cpus} CPUs), partition "
                       f"{_cluster.partition}, ready in {_cluster.started_seconds:.1f} s, SLURM_CONF={_cluster.conf}")
            _set_env("SLURM_CONF", str(_cluster.conf))
            _set_env(REASON_ENV, None)
            return _cluster
    summary = f"not available: {_reason}"
    _set_env(REASON_ENV, _reason)
    return None


def current() -> SlurmCluster | None:
    return _cluster


def skip_reason() -> str | None:
    """Why there is no test Slurm in this session, or None when there is one."""
    return None if _cluster is not None else _reason


def shutdown() -> None:
    """Stop the session's cluster (if we started one) and restore the environment as it was."""
    global _cluster, _reason
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    if _cluster is None:
        return
    cluster, _cluster = _cluster, None
    _reason = "the test Slurm was stopped at the end of the session"
    cluster.stop()
