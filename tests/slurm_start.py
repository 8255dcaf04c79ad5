"""Starting a private Slurm for the test suite: munged, slurmctld and slurmd, run and stopped by us.

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
"""
from __future__ import annotations

import os
import pwd
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import portpicker

import slurm_netns
from slurm_cluster import SlurmCluster, SlurmUnavailable, which

PARTITION = "debug"
START_SECONDS = 30.0
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "sinfo", "scancel", "scontrol", "sdiag")

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


def check_prerequisites(local_node: bool = True) -> str:
    """The short host name if this machine can run Slurm, else SlurmUnavailable saying why.

    local_node: the node is this machine, addressed by its host name (not so for namespaced nodes).
    """
    missing = [name for name in (*DAEMONS, *CLIENTS, "setpriv") if not which(name)]
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
    prefix = [which("setpriv"), "--pdeathsig", "TERM"]
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
    slurmd = which("slurmd")
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
        which("munged"), "--foreground", f"--key-file={mdir / 'munge.key'}", f"--socket={socket_path}",
        f"--pid-file={mdir / 'munged.pid'}", f"--seed-file={mdir / 'munged.seed'}", "--num-threads=2"],
        work, env, user="munge")
    _wait_for("its socket appeared", socket_path.exists, cluster, "munged", deadline)

    cluster.procs["slurmctld"] = _spawn("slurmctld", [which("slurmctld"), "-D", "-c", "-f", str(cluster.conf)],
                                        work, env, enter=net.enter(net.ctld) if net else ())
    _wait_for("it answered scontrol ping",
              lambda: "is UP" in cluster.run("scontrol", "ping", timeout=10).stdout, cluster, "slurmctld", deadline)

    for node in cluster.nodes:
        name = f"slurmd-{node}" if net else "slurmd"  # unique names: each has its own .out file
        cluster.procs[name] = _spawn(name, [which("slurmd"), "-D", "-N", node, "-f", str(cluster.conf)], work, env,
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

