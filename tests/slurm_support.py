"""A private Slurm for the test suite: munged, slurmctld and slurmd, started and stopped by us.

The Slurm backend has to be tested against a real Slurm, and CI is a fresh Debian machine, so the
tests bring their own: Debian's slurm-wlm and munge packages, a slurm.conf written here, and
everything (config, munge key and socket, state, spool, pids, logs) in one private directory under
/tmp. Clients find it through SLURM_CONF, so nothing in /etc is touched and a Slurm that is already
running on the machine is neither used nor disturbed. The ports are picked free, so two test
sessions on one machine (a developer's and a clean-clone CI check) do not clash.

Two kinds: `start()` is one node, the machine itself, on 127.0.0.1; `start(hosts=2)` is a cluster of
2 nodes on one machine, each node a separate network host (its own network namespace, address and
name: tests/slurm_netns.py), with slurmctld in a namespace of its own, so that a job's tasks really
run on different hosts and talk to each other over the network.

Where no Slurm can be started (packages missing, not root, the host name does not resolve, no network
namespaces, a daemon fails), `start()` raises SlurmUnavailable with a reason the tests skip with.

conftest.py drives this: `ensure_started()` (the one-node cluster, whose SLURM_CONF the session
exports) and `ensure_nodes_started()` (the 2-node one) once per session, before nbval starts notebook
kernels, which inherit SLURM_CONF; `shutdown()` at the end; `skip_reason()` and `nodes_skip_reason()`.
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

import slurm_netns

OPT_OUT_ENV = "KWNB_TEST_SLURM"  # "0": never start Slurm; "1": start it even if no collected test asks
REASON_ENV = "KWNB_TEST_SLURM_SKIP"  # set for notebooks (which cannot pytest.skip) when there is no Slurm
PARTITION = "debug"
START_SECONDS = 30.0
NODES = 2  # the multi-node cluster's size: enough for one task per node and for 2 + 1 tasks
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
SlurmctldHost={ctld_host}({ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
{listen}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged, not the system's /run/munge socket.
AuthInfo=socket={munge_socket}
StateSaveLocation={work}/ctld-state
SlurmdSpoolDir={work}/slurmd-spool{per_node}
SlurmctldPidFile={work}/slurmctld.pid
SlurmdPidFile={work}/slurmd{per_node}.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdLogFile={work}/slurmd{per_node}.log
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
{node_lines}
PartitionName={partition} Nodes={node_names} Default=YES MaxTime=INFINITE State=UP
"""


LISTEN_HERE = """# Listen on 127.0.0.1 only, not on every interface.
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny"""
# With NoCtldInAddrAny slurmctld binds the address the host name resolves to (127.0.0.1), and srun
# would bind it too, where no other namespace reaches them.
LISTEN_NAMESPACED = """# Every daemon listens on all addresses of its own network namespace: its bridge address and loopback."""


class SlurmUnavailable(Exception):
    """No Slurm could be started here; the message says why (it becomes the tests' skip reason)."""


@dataclass
class SlurmCluster:
    """A running private Slurm: what tests need to submit to it, and the daemons to stop."""

    workdir: Path
    conf: Path
    node: str  # the first node (the only one of a one-node cluster)
    partition: str
    cpus: int  # per node
    version: str
    ports: tuple[int, int]
    nodes: list[str] = field(default_factory=list)
    network: slurm_netns.Network | None = None  # the nodes' namespaces, for a multi-node cluster
    idle_seconds: float = 0.0  # from start() until every node was idle
    started_seconds: float = 0.0  # ...until slurmctld's scheduler had run once: ready for jobs
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def address(self, node: str) -> str:
        """The IPv4 address a node's daemons and tasks use."""
        return self.network.address(node) if self.network else "127.0.0.1"

    def in_node(self, node: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command on a node, i.e. in its network namespace (on a one-node cluster: here)."""
        prefix = self.network.enter(node) if self.network else []
        return subprocess.run([*prefix, *argv], env=self.env, capture_output=True, text=True, timeout=timeout)

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
        """Cancel our jobs, stop the daemons we started (by pid, newest first), remove the namespaces
        (and what is left in them), the /etc/hosts lines and the directory."""
        try:
            if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
                self._cancel_jobs()
            for name in reversed(list(self.procs)):
                _stop_process(self.procs.pop(name))
        finally:
            if self.network is not None:
                self.network.remove()
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


def check_prerequisites(local_node: bool = True) -> str:
    """The short host name if this machine can run Slurm, else SlurmUnavailable saying why.

    local_node: the node is this machine, addressed by its host name (not so for namespaced nodes).
    """
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
    if not local_node:
        return node
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


def _spawn(name: str, argv: list[str], work: Path, env: dict, user: str | None = None,
           enter: list[str] = ()) -> subprocess.Popen:
    """Start a daemon in the foreground as our child, so we hold its pid and nothing else.

    setpriv --pdeathsig: if pytest dies without cleaning up (kill -9), the daemon is told to stop too.
    Its own session, so a Ctrl-C meant for pytest reaches pytest, which then stops it in order.
    `enter`: the prefix that puts it in a node's network namespace (nsenter execs, so the pid stays).
    """
    prefix = [_which("setpriv"), "--pdeathsig", "TERM"]
    if user:
        prefix += ["--reuid", user, "--regid", user, "--init-groups"]
    prefix += list(enter)
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


def start(partition: str = PARTITION, timeout: float = START_SECONDS, hosts: int = 0) -> SlurmCluster:
    """Start munged, slurmctld and slurmd and wait until the nodes are idle; stop all of it on any failure.

    hosts=0: one node, this machine, on 127.0.0.1. hosts=K: K nodes, each in a network namespace of its
    own (one slurmd each), and slurmctld in another (SlurmUnavailable where namespaces cannot be made).
    """
    t0 = time.monotonic()
    host = check_prerequisites(local_node=not hosts)
    slurmd = _which("slurmd")
    layout, cpus = node_layout(slurmd)
    version = subprocess.run([slurmd, "-V"], capture_output=True, text=True, timeout=30).stdout.strip()
    # /tmp explicitly: munged checks every parent of its key for group/world write (sticky /tmp passes),
    # and the munge socket path must stay short (108 bytes). 0711 so the munge user can pass through.
    work = Path(tempfile.mkdtemp(prefix="kwnb-slurm-", dir="/tmp"))
    os.chmod(work, 0o711)
    cluster = SlurmCluster(workdir=work, conf=work / "slurm.conf", node=host, partition=partition, cpus=cpus,
                           version=version, ports=_pick_ports(), nodes=[host])
    try:
        if hosts:
            try:
                cluster.network = slurm_netns.create(hosts)
            except slurm_netns.NetworkUnavailable as error:
                raise SlurmUnavailable(f"no network namespaces for a {hosts}-node Slurm: {error}") from None
            cluster.nodes = list(cluster.network.nodes)
            cluster.node = cluster.nodes[0]
        _write_config(cluster, host, layout)
        _start_daemons(cluster, t0, t0 + timeout)
    except BaseException:
        cluster.stop()
        raise
    cluster.started_seconds = time.monotonic() - t0
    return cluster


def _write_config(cluster: SlurmCluster, host: str, layout: str) -> None:
    """The munge key, the directories and slurm.conf; slurmctld's address is 127.0.0.1 or on the bridge."""
    work, net = cluster.workdir, cluster.network
    _munge_dir(work)
    (work / "ctld-state").mkdir(mode=0o700)
    for node in cluster.nodes if net else [""]:
        (work / f"slurmd-spool{'-' * bool(node)}{node}").mkdir(mode=0o700)
    (work / "plugstack.conf").write_text("")  # not Debian's /etc/slurm one: no SPANK plugins
    node_lines = "\n".join(f"NodeName={node} NodeAddr={cluster.address(node)} NodeHostname={node} {layout} "
                           f"State=UNKNOWN" for node in cluster.nodes)
    # slurmctld runs only where the host name is SlurmctldHost's; clients and slurmd use the address in
    # parentheses.
    cluster.conf.write_text(SLURM_CONF.format(
        ctld_host=host, ctld_addr=net.address(net.ctld) if net else "127.0.0.1", ctld_port=cluster.ports[0],
        slurmd_port=cluster.ports[1], listen=LISTEN_NAMESPACED if net else LISTEN_HERE,
        munge_socket=work / "munge" / "munge.socket", work=work, per_node="-%n" if net else "",
        node_lines=node_lines, node_names=",".join(cluster.nodes), partition=cluster.partition))


def _start_daemons(cluster: SlurmCluster, t0: float, deadline: float) -> None:
    """munged here; slurmctld and each slurmd here or in their namespaces; then wait until all is idle."""
    work, env, net = cluster.workdir, cluster.env, cluster.network
    mdir = work / "munge"
    socket_path = mdir / "munge.socket"
    cluster.procs["munged"] = _spawn("munged", [
        _which("munged"), "--foreground", f"--key-file={mdir / 'munge.key'}", f"--socket={socket_path}",
        f"--pid-file={mdir / 'munged.pid'}", f"--seed-file={mdir / 'munged.seed'}", "--num-threads=2"],
        work, env, user="munge")
    _wait_for("its socket appeared", socket_path.exists, cluster, "munged", deadline)

    cluster.procs["slurmctld"] = _spawn("slurmctld", [_which("slurmctld"), "-D", "-c", "-f", str(cluster.conf)],
                                        work, env, enter=net.enter(net.ctld) if net else ())
    _wait_for("it answered scontrol ping",
              lambda: "is UP" in cluster.run("scontrol", "ping", timeout=10).stdout, cluster, "slurmctld", deadline)

    for node in cluster.nodes:
        name = f"slurmd-{node}" if net else "slurmd"  # unique names: each has its own .out file
        cluster.procs[name] = _spawn(name, [_which("slurmd"), "-D", "-N", node, "-f", str(cluster.conf)], work, env,
                                     enter=net.enter(node) if net else ())
    for node in cluster.nodes:
        _wait_for(f"node {node} was idle in partition {cluster.partition}",
                  lambda: _node_states(cluster).get(node) == "idle", cluster,
                  f"slurmd-{node}" if net else "slurmd", deadline)
    cluster.idle_seconds = time.monotonic() - t0
    # slurmctld's scheduler first runs about 3 s after it starts; a job submitted before then waits
    # for it. Waiting here keeps every job's turnaround the same (about half a second).
    _wait_for("its scheduler had run once", lambda: _scheduler_cycles(cluster) > 0, cluster, "slurmctld", deadline)


def _scheduler_cycles(cluster: SlurmCluster) -> int:
    found = re.search(r"Main schedule statistics.*?Total cycles:\s*(\d+)", cluster.run("sdiag", timeout=10).stdout,
                      re.S)
    return int(found.group(1)) if found else 0


def _node_states(cluster: SlurmCluster) -> dict[str, str]:
    """{node: state} as sinfo shortens them (idle, mix, alloc, down*, ...)."""
    result = cluster.run("sinfo", "-h", "-N", "-p", cluster.partition, "-o", "%N %t", timeout=10)
    lines = result.stdout.splitlines() if result.returncode == 0 else []
    return dict(line.split(None, 1) for line in lines if " " in line)


# ---- one cluster of each kind per pytest session (conftest.py calls these) ----

summary: str | None = None  # one line for the end of the pytest report: what ran, or why nothing did
nodes_summary: str | None = None  # the same for the multi-node cluster
_saved_env: dict[str, str | None] = {}


@dataclass
class _Slot:
    """The session's cluster of one kind: started at most once, or the reason there is none."""

    hosts: int
    cluster: SlurmCluster | None = None
    reason: str | None = "Slurm was not started in this session (no collected test asked for it)"
    attempted: bool = False

    def ensure(self) -> SlurmCluster | None:
        if self.attempted:
            return self.cluster
        self.attempted = True
        if opted_out():
            self.reason = f"{OPT_OUT_ENV}=0: the test Slurm was switched off"
            return None
        try:
            self.cluster = start(hosts=self.hosts)
        except SlurmUnavailable as error:
            self.reason = str(error)
        except (OSError, subprocess.SubprocessError) as error:
            self.reason = f"the test Slurm could not be started: {type(error).__name__}: {error}"
        else:
            self.reason = None
        return self.cluster

    def summary(self) -> str:
        cluster = self.cluster
        if cluster is None:
            return f"not available: {self.reason}"
        if cluster.network:
            where = (f"nodes {', '.join(f'{node} ({cluster.address(node)})' for node in cluster.nodes)}, "
                     f"{cluster.cpus} CPUs each, slurmctld at {cluster.network.address(cluster.network.ctld)}")
        else:
            where = f"node {cluster.node} ({cluster.cpus} CPUs)"
        return (f"{cluster.version}: {where}, partition {cluster.partition}, idle in {cluster.idle_seconds:.1f} s, "
                f"ready in {cluster.started_seconds:.1f} s, SLURM_CONF={cluster.conf}")

    def stop(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            self.reason = "the test Slurm was stopped at the end of the session"
            cluster.stop()


_one, _multi = _Slot(hosts=0), _Slot(hosts=NODES)


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
    """Start the session's one-node cluster once and export SLURM_CONF; on failure remember why (and export that).

    A SLURM_CONF already in the environment (a developer's own Slurm) is overridden for the session:
    the tests assume an idle node and a partition of their own, which a shared cluster cannot promise.
    """
    global summary
    if not _one.attempted:
        cluster = _one.ensure()
        summary = _one.summary()
        if cluster is not None:
            _set_env("SLURM_CONF", str(cluster.conf))
        _set_env(REASON_ENV, _one.reason)
    return _one.cluster


def ensure_nodes_started() -> SlurmCluster | None:
    """Start the session's multi-node cluster once. Its SLURM_CONF is not exported: tests use its .env,
    and conftest.py gives it to the kernels of notebooks that use Slurm."""
    global nodes_summary
    if not _multi.attempted:
        _multi.ensure()
        nodes_summary = _multi.summary()
    return _multi.cluster


def current() -> SlurmCluster | None:
    return _one.cluster


def nodes_current() -> SlurmCluster | None:
    return _multi.cluster


def skip_reason() -> str | None:
    """Why there is no one-node test Slurm in this session, or None when there is one."""
    return _one.reason


def nodes_skip_reason() -> str | None:
    """Why there is no multi-node test Slurm in this session, or None when there is one."""
    return _multi.reason


def shutdown() -> None:
    """Stop the session's clusters (those we started) and restore the environment as it was."""
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    _multi.stop()
    _one.stop()
