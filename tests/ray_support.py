"""The test suite's Ray cluster: 3 nodes on this machine, each its own network host, started once per pytest
session (the `ray_cluster` fixture, conftest.py) and stopped by pid.

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
PROBE_SECONDS = 60.0
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
        for starter in [*self.nodes, self.head]:
            _kill_tree(starter.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(starter.poll() is None for starter in [*self.nodes, self.head]) and time.monotonic() < deadline:
            time.sleep(0.2)
        for starter in [*self.nodes, self.head]:
            _kill_tree(starter.pid, signal.SIGKILL)
            starter.poll()
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
    node_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    head_ip = network.root_address
    port = _free_port(head_ip)
    common = ["--block", "--disable-usage-stats", f"--object-store-memory={OBJECT_STORE}"]
    group = _starting_group()
    head = _starter([str(ray_cli), "start", "--head", f"--node-ip-address={head_ip}", f"--port={port}",
                     "--num-cpus=0", f"--temp-dir={temp}", "--include-dashboard=false", *common], node_env,
                    f"{temp}/head.err", group)
    cluster = RayCluster(f"{head_ip}:{port}", env, network, head, temp=temp)
    try:
        _wait_for_port(head_ip, port, head)
        _wait_for_nodes(cluster, 1)  # a node started before the head's raylet registered gives up
        for host in network.nodes:
            cluster.nodes.append(_starter(
                [*network.enter(host), str(ray_cli), "start", f"--address={cluster.address}",
                 f"--node-ip-address={network.address(host)}", f"--num-cpus={CPUS_PER_NODE}", *common],
                node_env, f"{temp}/{host}.err", group))
        _wait_for_nodes(cluster, 1 + NODES)
    except BaseException:
        cluster.stop()
        _leave_group(group, [])
        raise
    _leave_group(group, _group_pids(group))
    cluster.started_seconds = time.monotonic() - began
    return cluster


def _wait_for_port(host: str, port: int, head: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RayUnavailable(f"the Ray head exited with code {head.returncode}: "
                                 f"{_tail(head)}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RayUnavailable(f"the Ray head did not listen on {host}:{port} within {START_SECONDS:g} s")


def _wait_for_nodes(cluster: RayCluster, count: int) -> None:
    """Until `ray status`-like: the GCS lists `count` live nodes (asked from a child, not this process's Ray)."""
    probe = ("import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        for starter in [cluster.head, *cluster.nodes]:
            if starter.poll() is not None:
                raise RayUnavailable(f"a Ray node exited with code {starter.returncode}: "
                                     f"{_tail(starter)}")
        try:
            result = subprocess.run([sys.executable, "-c", probe, cluster.address], capture_output=True, text=True,
                                    env={**os.environ, **cluster.env}, timeout=PROBE_SECONDS)
        except subprocess.TimeoutExpired:
            continue  # a raylet still starting keeps a driver waiting: ask again
        if result.returncode == 0 and result.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(1)
    raise RayUnavailable(f"the Ray cluster did not have {count} live nodes within {START_SECONDS:g} s")


def _starter(argv: list[str], env: dict[str, str], errors: str, group: Path | None) -> subprocess.Popen:
    """One `ray start --block`, its stderr kept in a file (`_tail` reads its end when it fails), in the
    starting CPU group if there is one (its daemons follow it there)."""
    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
    with open(errors, "wb") as said:
        starter = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=said, start_new_session=True,
                                   preexec_fn=enter)
    starter.errors = errors
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
    return Path(starter.errors).read_text(errors="replace")[-500:]


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
