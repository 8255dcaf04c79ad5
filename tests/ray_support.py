"""The test suite's Ray cluster: 3 nodes on this machine, each its own network host, started once for
tests/test_ray.py (the module-scoped `ray_cluster` fixture, conftest.py) and stopped by pid.

The nodes are hosts of tests/slurm_netns.py's kind: the head in this machine's own namespace, on the address
the test network gives it on its private bridge (the test's driver, this process, must share a node with a
raylet: Ray joins a driver to its local one), and two nodes in namespaces of their own. The head holds no
CPU (`--num-cpus 0`), so every task runs inside a namespace: a TensorFlow server listens on 0.0.0.0, which
there is only the namespace's own address. Each node is `ray start --block` (its pid stops it: its daemons
are its descendants, each SIGKILLed by pid after it). Token authentication is on (RAY_AUTH_MODE=token, a
fresh token in RAY_AUTH_TOKEN for the session): the head's ports are open to every user of this machine.
"""
from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

import slurm_netns

OPT_OUT_ENV = "KWNB_TEST_RAY"  # "0": never start the test Ray cluster
NODES = 2  # besides the head: enough for one task per node of a 2-worker job
CPUS_PER_NODE = 2  # logical CPUs Ray may hand out on each node: 2 tasks pack onto one
OBJECT_STORE = 80 * 1024 * 1024  # bytes per node: Ray's minimum is 75 MiB; kwnb sends only logs through it
START_SECONDS = 240.0  # on 2 busy cores a node took 15-40 s to register
# What `ray start` prints once the GCS lists its node (its raylet registered: ray/scripts/scripts.py prints it
# after ray/_private/node.py found the node in the GCS). Read from its output, this costs nothing; a probe
# instead (a Python joining the cluster as a driver to count the live nodes) took 3-13 s a time, its CPU
# taken from the nodes starting on the same 2 cores.
STARTED = "Ray runtime started."
# The GCS health-checks each raylet every period and calls a node dead after 5 failures in a row: 15 s at
# Ray's 3000 ms (ray_config_def.h), 5 s at 1000. A killed node refuses each check at once: the lost-node test
# took 30.6 s, against 38-40; a live raylet is still called dead only after 5 checks that each time out (10 s).
HEALTH_CHECK_MS = 1000
# Every node's. No log monitor: it sends the tasks' output to drivers, and kwnb's driver joins with
# log_to_driver=False; 3 Python processes fewer (2-3 CPU-s each) while the nodes start.
START_OPTIONS = ["--block", "--disable-usage-stats", f"--object-store-memory={OBJECT_STORE}",
                 "--include-log-monitor=false"]
# While the nodes start they share a CPU group of 8 times the usual weight (cgroup v1 cpu.shares, 1024 is
# everyone's): under a load of 30-40 on the 2 cores, a raylet at the usual weight missed Ray's fixed 30 s for
# registering (ray/_private/node.py) four times of four. Once the cluster is up, every process of it goes
# back to the machine's group (`_leave_group`), so the tasks it runs get the usual share.
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
STARTING_SHARES = 8192
REPO = Path(__file__).resolve().parents[1]


_saved_env: dict[str, str | None] = {}  # what start() set in this process's environment, as it was before


class RayUnavailable(Exception):
    """No test Ray cluster here; the message says why (the tests skip with it)."""


@dataclass
class RayCluster:
    address: str  # the head's GCS, HOST:PORT
    env: dict[str, str]  # what the driver needs: the token, and Ray's settings
    network: slurm_netns.Network
    head: subprocess.Popen
    nodes: list[subprocess.Popen] = field(default_factory=list)
    temp: str = ""
    started_seconds: float = 0.0

    def node_address(self, position: int) -> str:
        return self.network.address(self.network.nodes[position])

    def pids(self) -> set[int]:
        """Every process of the cluster now: the `ray start` processes, their descendants, and the agents
        raylets start (which leave the tree), found by the cluster's own temp folder in their command line."""
        found = set()
        for starter in [self.head, *self.nodes]:
            found.add(starter.pid)
            try:
                found |= {child.pid for child in psutil.Process(starter.pid).children(recursive=True)}
            except psutil.Error:
                pass
        for process in psutil.process_iter(["cmdline"]):
            if any(self.temp in part for part in process.info["cmdline"] or ()):
                found.add(process.pid)
        return found

    def remove_node(self, position: int) -> None:
        """Take one node away as a failed machine goes: SIGKILL to its processes, by pid."""
        starter = self.nodes[position]
        _kill_tree(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)

    def stop(self) -> None:
        """SIGKILL to every process of the cluster, as `remove_node` takes a node: nothing of it is kept, and on
        a SIGTERM `ray start` stops its daemons one after the other, which took over 12 s here."""
        for starter in [*self.nodes, self.head]:
            _kill_tree(starter.pid, signal.SIGKILL)
            starter.wait(timeout=30)
        for pid in self.pids():
            _kill_tree(pid, signal.SIGKILL)
        self.network.remove()  # kills what is left inside the namespaces
        subprocess.run(["rm", "-rf", self.temp], check=False)


def _kill_tree(pid: int, signum: int) -> None:
    try:
        parent = psutil.Process(pid)
        processes = [*parent.children(recursive=True), parent]
    except psutil.Error:
        return
    for process in processes:
        try:
            process.send_signal(signum)
        except psutil.Error:
            pass


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def start(attempts: int = 4) -> RayCluster:
    """The cluster, tried up to `attempts` times: on 2 busy cores a raylet can miss Ray's own 30 s limit
    for registering (ray/_private/node.py), and the attempt then fails with "timed out during startup"."""
    for attempt in range(attempts):
        try:
            return _start()
        except RayUnavailable as error:
            if "timed out during startup" not in str(error) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _start() -> RayCluster:
    if os.environ.get(OPT_OUT_ENV, "").strip().lower() in ("0", "no", "false", "off"):
        raise RayUnavailable(f"{OPT_OUT_ENV}=0: the test Ray cluster was switched off")
    if importlib.util.find_spec("ray") is None:
        raise RayUnavailable('Ray is not installed (pip install "kwnb[ray]")')
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        raise RayUnavailable(f"Ray's command line is not beside {sys.executable}")
    try:
        network = slurm_netns.create(NODES)
    except slurm_netns.NetworkUnavailable as error:
        raise RayUnavailable(f"no namespaced nodes: {error}") from None
    began = time.monotonic()
    temp = tempfile.mkdtemp(prefix="kwray", dir="/tmp")  # short: Ray's socket paths live under it
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_USAGE_STATS_ENABLED": "0"}
    for name, value in env.items():  # this process is the driver: Ray reads its auth mode once, at first use
        _saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value
    node_env = {**os.environ, **env, "RAY_health_check_period_ms": str(HEALTH_CHECK_MS),
                "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    head_ip = network.root_address
    port = _free_port(head_ip)
    # -u: `ray start --block` never exits, so a line left in its output buffer would never reach the file.
    ray_start = [sys.executable, "-u", str(ray_cli), "start", *START_OPTIONS]
    group = _starting_group()
    head = _starter([*ray_start, "--head", f"--node-ip-address={head_ip}", f"--port={port}", "--num-cpus=0",
                     f"--temp-dir={temp}", "--include-dashboard=false"], node_env, f"{temp}/head.log", group)
    cluster = RayCluster(f"{head_ip}:{port}", env, network, head, temp=temp)
    try:
        _wait_for_started(cluster, [head])  # a node started before the head's raylet registered gives up
        # One after the other: a raylet registers only once its node's dashboard and runtime-env agents (two
        # Python processes) are up, within Ray's 30 s. Started both at once under a load of 9-19, a node missed
        # it in 2 starts of 11 (each a whole new attempt, 45 s); one at a time, 6 of 6 made it, 5.5-7.7 s each.
        for host in network.nodes:
            cluster.nodes.append(_starter(
                [*network.enter(host), *ray_start, f"--address={cluster.address}",
                 f"--node-ip-address={network.address(host)}", f"--num-cpus={CPUS_PER_NODE}"],
                node_env, f"{temp}/{host}.log", group))
            _wait_for_started(cluster, cluster.nodes[-1:])
    except BaseException:
        cluster.stop()
        _leave_group(group, [])
        raise
    _leave_group(group, _group_pids(group))
    cluster.started_seconds = time.monotonic() - began
    return cluster


def _wait_for_started(cluster: RayCluster, starters: list[subprocess.Popen]) -> None:
    """Until each of `starters` printed STARTED (its output file read every 0.2 s), while none of the
    cluster's `ray start` processes exited."""
    deadline = time.monotonic() + START_SECONDS
    waiting = list(starters)
    while True:
        for starter in [cluster.head, *cluster.nodes]:
            if starter.poll() is not None:
                raise RayUnavailable(f"a Ray node exited with code {starter.returncode}: {_tail(starter)}")
        waiting = [starter for starter in waiting if STARTED not in Path(starter.log).read_text(errors="replace")]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise RayUnavailable(f"{len(waiting)} Ray node(s) had not started within {START_SECONDS:g} s: "
                                 f"{_tail(waiting[0])}")
        time.sleep(0.2)


def _starter(argv: list[str], env: dict[str, str], log: str, group: Path | None) -> subprocess.Popen:
    """One `ray start --block`, its output kept in a file (STARTED is looked for there, and `_tail` reads its
    end when it fails), in the starting CPU group if there is one (its daemons follow it there)."""
    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
    with open(log, "wb") as said:
        starter = subprocess.Popen(argv, env=env, stdout=said, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=enter)
    starter.log = log
    return starter


def _starting_group() -> Path | None:
    """A cgroup v1 CPU group with STARTING_SHARES, for the nodes while they start (None where none can be made)."""
    group = CPU_CGROUP / f"kwray{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(str(STARTING_SHARES))
    except OSError:
        return None
    return group


def _group_pids(group: Path | None) -> list[int]:
    return [int(pid) for pid in (group / "cgroup.procs").read_text().split()] if group is not None else []


def _leave_group(group: Path | None, pids) -> None:
    """The cluster is up: its processes back to the machine's group, as everyone's, and the group removed."""
    if group is None:
        return
    for pid in pids:
        try:
            (CPU_CGROUP / "cgroup.procs").write_text(str(pid))
        except OSError:
            pass  # gone already
    try:
        group.rmdir()
    except OSError:
        pass


def _tail(starter: subprocess.Popen) -> str:
    return Path(starter.log).read_text(errors="replace")[-500:]


def stop(cluster: RayCluster) -> None:
    """Leave the cluster (this process joined it as the tests' driver), then stop it."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    cluster.stop()
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
