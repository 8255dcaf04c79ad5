"""Several network hosts on one machine, for the multi-node test Slurm: a namespace per host on a bridge.

Each Slurm node is a host of its own: a network namespace (`ip netns add`), a veth pair into a
private bridge, its own IPv4 address in a /24 that nothing on this machine uses, and its name in
/etc/hosts so that Slurm and the TensorFlow workers resolve it. slurmctld gets a namespace of its own
on the bridge: with NoCtldInAddrAny it binds its ControlAddr, which the node namespaces must reach.
The root namespace gets an address on the bridge too, so that the test process reaches everything.
Daemons enter a namespace with `nsenter --net` only: `ip netns exec` also remounts /sys without the
cgroup mount, and slurmd then refuses to start.

Everything made here is named after a token, `kwnb<pid><letter>`, and removed by those names: the
namespaces, the bridge and veth links, and the /etc/hosts lines that end with `# kwnb-test-slurm
TOKEN`. What a killed session left behind (its pid is gone) is removed at the next start.
"""
from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
HOSTS = Path("/etc/hosts")
NETNS_DIR = Path("/var/run/netns")  # where `ip netns add` mounts the namespaces it names
MARK = "# kwnb-test-slurm"  # ends every /etc/hosts line added here, followed by the token
# Candidates for the private /24, first free one wins (another session's bridge takes one).
SUBNETS = [ipaddress.ip_network(f"10.213.{third}.0/24") for third in range(47, 63)]
FIRST_NODE_HOST = 11  # node i gets .11+i; .1 is the root namespace, .2 slurmctld
# Names this module gives: the token, then c (slurmctld's namespace), nN (a node), br, vN or pN (links).
OWN_NAME = re.compile(r"^kwnb(\d+)[a-z](?:c|n\d+|br|v\d+|p\d+)?$")

# Prepended to a training script: where this task really is (its network namespace, and the address it
# uses to reach the next task), printed before TensorFlow starts.
WHERE = """import json as _json, os as _os, socket as _socket
_config = _json.loads(_os.environ["TF_CONFIG"])
_workers = _config["cluster"]["worker"]
_peer = _workers[(_config["task"]["index"] + 1) % len(_workers)].rpartition(":")[0]
with _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM) as _probe:
    _probe.connect((_peer, 9))  # UDP: nothing is sent; the kernel picks the route and our address on it
    print("HOST " + _json.dumps({"netns": _os.readlink("/proc/self/ns/net"), "address": _probe.getsockname()[0]}),
          flush=True)
"""


class NetworkUnavailable(Exception):
    """No namespaced hosts can be made here; the message says why (the tests skip with it)."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([_which("ip"), *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkUnavailable(f"`ip {' '.join(args)}` failed: {result.stderr.strip() or result.returncode}")
    return result


@dataclass
class Network:
    """The namespaces, links and /etc/hosts lines of one multi-node cluster, and how to enter a host."""

    token: str
    subnet: ipaddress.IPv4Network
    nodes: list[str]
    made: list[tuple[str, str]] = field(default_factory=list)  # ("netns" | "link", name), in creation order

    @property
    def bridge(self) -> str:
        return f"{self.token}br"

    @property
    def ctld(self) -> str:
        """slurmctld's namespace (not a Slurm node)."""
        return f"{self.token}c"

    @property
    def root_address(self) -> str:
        return str(self.subnet[1])

    def address(self, host: str) -> str:
        if host == self.ctld:
            return str(self.subnet[2])
        return str(self.subnet[FIRST_NODE_HOST + self.nodes.index(host)])

    def enter(self, host: str) -> list[str]:
        """The command prefix that runs a program in the host's network namespace (and nothing else's)."""
        return [_which("nsenter"), f"--net={NETNS_DIR / host}"]

    def namespaces(self) -> list[str]:
        return [name for kind, name in self.made if kind == "netns"]

    def remove(self) -> None:
        """Kill what is left in our namespaces, delete them and our links, and drop our /etc/hosts lines."""
        for name in self.namespaces():
            _kill_inside(name)
        _edit_hosts(lambda lines: [line for line in lines if not _is_ours(line, self.token)])
        for kind, name in reversed(self.made):  # veths, then namespaces (which take their veth ends), bridge
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            elif _ip("link", "show", name, check=False).returncode == 0:
                _ip("link", "del", name, check=False)
        self.made.clear()


def _kill_inside(namespace: str) -> None:
    """SIGKILL every process in one of our namespaces: only our daemons and their jobs' steps can be there
    (after a killed session, its jobs' slurmstepd and srun would otherwise wait forever for their slurmd)."""
    for pid in _ip("netns", "pids", namespace, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def check() -> None:
    """NetworkUnavailable saying why, where namespaces cannot be made here."""
    missing = [name for name in ("ip", "nsenter") if not _which(name)]
    if missing:
        raise NetworkUnavailable(f"{' and '.join(missing)} not found (Debian: apt-get install iproute2 util-linux); "
                                 f"the multi-node test Slurm puts each node in a network namespace")
    if os.geteuid() != 0:
        raise NetworkUnavailable("not root: network namespaces, veth links and /etc/hosts need root")


def create(count: int) -> Network:
    """A bridge, slurmctld's namespace and `count` node namespaces, each with its address and name."""
    check()
    remove_stale()
    token = _free_token()
    with _choosing_a_subnet():  # another test process (pytest-xdist's, another checkout's) may be choosing too
        net = Network(token, _free_subnet(), [f"{token}n{i + 1}" for i in range(count)])
        try:
            _ip("link", "add", net.bridge, "type", "bridge")
            net.made.append(("link", net.bridge))
            _ip("addr", "add", f"{net.root_address}/{net.subnet.prefixlen}", "dev", net.bridge)
        except BaseException:
            net.remove()
            raise
    try:
        _ip("link", "set", net.bridge, "up")
        for position, host in enumerate([net.ctld, *net.nodes]):
            _add_host(net, host, position)
        lines = [f"{net.address(host)} {host} {MARK} {token}\n" for host in net.nodes]
        _edit_hosts(lambda existing: existing + lines)
    except BaseException:
        net.remove()
        raise
    return net


def _add_host(net: Network, host: str, position: int) -> None:
    _ip("netns", "add", host)
    net.made.append(("netns", host))
    outside, inside = f"{net.token}v{position}", f"{net.token}p{position}"
    _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
    net.made.append(("link", outside))  # deleting one end deletes the pair
    _ip("link", "set", inside, "netns", host)
    _ip("link", "set", outside, "master", net.bridge)
    _ip("link", "set", outside, "up")
    inside_ip = [*net.enter(host), _which("ip")]
    for args in (["addr", "add", f"{net.address(host)}/{net.subnet.prefixlen}", "dev", inside],
                 ["link", "set", inside, "up"], ["link", "set", "lo", "up"]):
        result = subprocess.run(inside_ip + args, capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise NetworkUnavailable(f"`ip {' '.join(args)}` in namespace {host} failed: {result.stderr.strip()}")


def _free_token() -> str:
    taken = set(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else set()
    taken |= {link["ifname"] for link in json.loads(_ip("-j", "link").stdout or "[]")}
    for letter in "abcdefghijklmnopqrstuvwxyz":
        token = f"kwnb{os.getpid()}{letter}"
        if not any(name.startswith(token) for name in taken):
            return token
    raise NetworkUnavailable(f"26 test networks of process {os.getpid()} exist already")


@contextlib.contextmanager
def _choosing_a_subnet():
    """Held from looking for a free /24 until the bridge has its address: the address is what marks it taken."""
    with open(Path(tempfile.gettempdir()) / "kwnb-test-subnets.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _free_subnet() -> ipaddress.IPv4Network:
    """The first candidate /24 that no address or route of this machine's root namespace overlaps."""
    used = []
    for entry in json.loads(_ip("-j", "-4", "addr").stdout or "[]"):
        used += [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network for a in entry.get("addr_info", [])]
    for route in json.loads(_ip("-j", "-4", "route").stdout or "[]"):
        if route.get("dst", "default") != "default":
            used.append(ipaddress.ip_network(route["dst"], strict=False))
    for subnet in SUBNETS:
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise NetworkUnavailable(f"every candidate subnet ({SUBNETS[0]} to {SUBNETS[-1]}) is in use on this machine")


def _is_ours(line: str, token: str | None = None) -> bool:
    """A line this module wrote (of `token`, or of any token)."""
    text = line.rstrip("\n")
    if token is not None:
        return text.endswith(f"{MARK} {token}")
    return re.search(re.escape(MARK) + r" kwnb\d+[a-z]$", text) is not None


def _edit_hosts(change) -> None:
    """Rewrite /etc/hosts in place (it may be a bind mount, which a rename would not replace), locked."""
    with open(HOSTS, "r+") as hosts:
        fcntl.flock(hosts, fcntl.LOCK_EX)
        lines = hosts.readlines()
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        new = change(lines)
        if new != lines:
            hosts.seek(0)
            hosts.writelines(new)
            hosts.truncate()


def _alive(pid: str) -> bool:
    return Path(f"/proc/{pid}").exists()


def remove_stale() -> None:
    """Remove what a killed session made: our names whose pid is gone (a live pid's things are left alone)."""
    def dead(name: str) -> bool:
        match = OWN_NAME.match(name)
        return bool(match) and not _alive(match.group(1))

    _edit_hosts(lambda lines: [line for line in lines
                               if not (_is_ours(line) and dead(line.rstrip("\n").rsplit(" ", 1)[-1]))])
    for name in os.listdir(NETNS_DIR) if NETNS_DIR.exists() else []:
        if dead(name):
            _kill_inside(name)
            _ip("netns", "del", name, check=False)
    for link in json.loads(_ip("-j", "link").stdout or "[]"):
        if dead(link["ifname"].split("@")[0]):
            _ip("link", "del", link["ifname"].split("@")[0], check=False)
