"""A private network for a run's local tasks: one network namespace, loopback up, that no other host
can connect into (TensorFlow's servers listen on every interface and run any graph they are sent).

The namespace is held by a small Python process started with util-linux's `unshare --net` (plus
`--user --map-root-user` when not root, or for pasta, which cannot join a root-owned namespace), so
it needs no privileges where the OS allows unprivileged user namespaces. Tasks enter it with
`nsenter`. The holder also answers the kernel's port probes and picks free ports from inside, over a
pipe: the kernel is outside and cannot connect to the tasks itself. Outbound access, where installed,
comes from user-mode networking (slirp4netns, else pasta), which forwards nothing inward. Both open the
TUN device as the user: where it cannot be opened (mode 600, or absent in a container) neither is chosen,
and a tool that fails at start leaves the run in its private network without outside access.

Cleanup: the holder ends when its parent (the kernel) changes or closes the pipe, as a task's
bootstrap watchdog does; slirp4netns ends when the holder does (--exit-fd), pasta is ended by the holder.
"""
from __future__ import annotations

import functools
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import LaunchError
from ..task.process_group import OWN_PROCESS_GROUP  # as the tasks: a Ctrl-C meant for `kwnb run` misses the helpers

USERNET_ENV = "KWNB_USERNET"  # slirp4netns, pasta or none: which user-mode networking to use (default: the first found)
TOOLS = ("slirp4netns", "pasta")
TUN_DEVICE = "/dev/net/tun"  # both tools open it inside the namespace, with the user's rights on it
START_SECONDS = 10.0  # the holder and the tool start in ~20 ms; a loaded machine gets ample time
ANSWER_SECONDS = 1.0  # a probe answers in ~0.1 ms; a holder this slow is treated as gone

# The holder, run inside the namespace by path (standard library only, under -S -I: no site-packages, and not
# its own folder on sys.path). kwnb/task/netns_holder.py says what it answers.
HOLDER = str(Path(__file__).parents[1] / "task" / "netns_holder.py")


@dataclass(frozen=True)
class Support:
    """What this machine allows: a private namespace (or why not), and which user-mode networking."""

    forbidden_by: str  # "" when a private network can be made here
    tool: str  # slirp4netns, pasta, or "" for none (then no outside network inside)
    user_namespace: bool  # whether the namespace needs a user namespace of its own
    dns: str = ""  # why names would not resolve inside, if they would not
    unusable: str = ""  # why an installed tool cannot work here (its TUN device), then `tool` is ""

    @property
    def possible(self) -> bool:
        return not self.forbidden_by

    @property
    def complete(self) -> bool:
        """Private and still able to reach the outside by name: what the default asks for."""
        return self.possible and bool(self.tool) and not self.dns


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """Probe once per process (~5 ms): make a throwaway namespace the way a run would."""
    tool = _choose_tool()
    unusable = tun_problem(tool) if tool else ""
    tool = "" if unusable else tool
    user_namespace = os.geteuid() != 0 or tool == "pasta"  # pasta cannot join a root-owned namespace
    missing = [name for name in ("unshare", "nsenter") if not shutil.which(name)]
    if missing:
        return Support(f"{' and '.join(missing)} (util-linux) not found on PATH", tool, user_namespace,
                       unusable=unusable)
    try:
        probe = subprocess.run([*_unshare(user_namespace), "true"], capture_output=True, text=True, timeout=10)
        failed, said = probe.returncode != 0, probe.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        failed, said = True, str(error)
    forbidden = forbidden_by(said, user_namespace) if failed else ""
    return Support(forbidden, tool, user_namespace, _dns_problem() if tool else "", unusable)


def tun_problem(tool: str, device: str | None = None) -> str:
    """Why `tool` could not open the TUN device as this user, or "": opened and closed at once (~10 us),
    which creates no interface (that takes an ioctl)."""
    try:
        os.close(os.open(device or TUN_DEVICE, os.O_RDWR))
        return ""
    except OSError as error:
        return f"{tool} is installed, but this user cannot open {device or TUN_DEVICE} ({error.strerror})"


def _choose_tool() -> str:
    wanted = os.environ.get(USERNET_ENV, "").strip()
    if wanted == "none":
        return ""
    for name in ([wanted] if wanted else TOOLS):
        if name in TOOLS and shutil.which(name):
            return name
    return ""


def _unshare(user_namespace: bool) -> list[str]:
    return ["unshare", *(["--user", "--map-root-user"] if user_namespace else []), "--net"]


def forbidden_by(stderr: str, user_namespace: bool, read=None) -> str:
    """Name what stops unshare here, from the switches that can, plus unshare's own words."""
    read, found = read or _read, []
    if user_namespace:
        switches = [("/proc/sys/kernel/unprivileged_userns_clone", "0",
                     "kernel.unprivileged_userns_clone = 0 (Debian's switch for unprivileged user namespaces)"),
                    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
                     "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns"
                     " = 1, as on Ubuntu 24.04)"),
                    ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces = 0")]
        found += [text for path, value, text in switches if read(path) == value]
    if _status_field(read("/proc/self/status"), "Seccomp") == "2":
        found.append("a seccomp filter (e.g. a container's profile) that may block unshare")
    why = "; ".join(found) or "unknown"
    return f"{why} (unshare said: {stderr or 'nothing'})"


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _status_field(status: str | None, field: str) -> str | None:
    found = re.search(rf"^{field}:\s*(.*?)\s*$", status or "", re.MULTILINE)
    return found.group(1) if found else None


def _dns_problem(resolv_conf: str = "/etc/resolv.conf") -> str:
    """A resolver on the host's loopback (systemd-resolved's 127.0.0.53) is out of the namespace's reach."""
    servers = [line.split()[1] for line in (_read(resolv_conf) or "").splitlines()
               if line.startswith("nameserver") and len(line.split()) > 1]
    if servers and all(server.startswith("127.") or server == "::1" for server in servers):
        return f"names would not resolve inside: {resolv_conf} names only {', '.join(servers)}, on the host's loopback"
    return ""


class PrivateNetwork:
    """One namespace, its holder process and its user-mode networking; tasks enter it with `enter`."""

    def __init__(self, found: Support | None = None):
        self.support = found or support()
        if not self.support.possible:
            raise LaunchError(f"cannot make a private network here: {self.support.forbidden_by}")
        self.holder: subprocess.Popen | None = None
        self.tool: subprocess.Popen | None = None
        self.setup_seconds = 0.0
        self.tool_error = ""  # why the user-mode networking failed to start; the network then has no outside access
        self._lock = threading.Lock()  # one request at a time on the holder's pipe; guards the two below
        self._asked = 0  # the number of the latest request
        self._pending = b""  # what was read from the holder past the last whole line

    # ----- life cycle --------------------------------------------------------------------------
    def start(self) -> "PrivateNetwork":
        began = time.monotonic()
        exit_read, exit_write = os.pipe()  # slirp4netns ends when the holder (the write end's owner) does
        try:
            try:
                self.holder = subprocess.Popen(
                    [*_unshare(self.support.user_namespace), sys.executable, "-S", "-I", HOLDER,
                     str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    pass_fds=(exit_write,), **OWN_PROCESS_GROUP)
            finally:
                os.close(exit_write)
            if self._read_line(START_SECONDS) != "ready":
                raise LaunchError(f"could not make a private network: {self._holder_error()}")
            try:
                self._start_tool(exit_read)
            except LaunchError as error:  # the namespace stays private, only without outside access
                self._end_tool()
                self.tool_error = str(error)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(exit_read)
        self.setup_seconds = time.monotonic() - began
        return self

    def _start_tool(self, exit_read: int) -> None:
        name, pid = self.support.tool, str(self.holder.pid)
        if name == "slirp4netns":
            ready_read, ready_write = os.pipe()
            try:
                self.tool = subprocess.Popen(
                    ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                     f"--exit-fd={exit_read}", f"--ready-fd={ready_write}", pid, "tap0"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                    pass_fds=(exit_read, ready_write), **OWN_PROCESS_GROUP)
                os.close(ready_write)
                ready = select.select([ready_read], [], [], START_SECONDS)[0] and os.read(ready_read, 1) == b"1"
            finally:
                os.close(ready_read)
        elif name == "pasta":
            # -t/-u none: nothing forwarded in; -T/-U none, --no-map-gw: the host's own ports stay out of reach.
            self.tool = subprocess.Popen(
                ["pasta", "--foreground", "--config-net", "--quiet", "-t", "none", "-u", "none", "-T", "none",
                 "-U", "none", "--no-map-gw", *(["--runas", "0"] if os.geteuid() == 0 else []), pid],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **OWN_PROCESS_GROUP)
            self._ask(f"companion {self.tool.pid}")
            ready = self._wait_for_route()
        else:
            return
        if not ready:
            said = _said(self.tool.stderr) if _ended(self.tool) else f"no answer in {START_SECONDS:g} s"
            raise LaunchError(f"{name} could not connect the private network: {said[-300:] or 'it said nothing'}")

    def _end_tool(self) -> None:
        """End a tool that failed to start; the holder forgets it (pasta's pid may be reused)."""
        if self.tool is not None:
            if self.tool.poll() is None:
                self.tool.terminate()
            _reap(self.tool)
            self.tool = None
            self._ask("companion 0")

    def _wait_for_route(self) -> bool:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and self.tool.poll() is None:
            if self._ask("route") == "1":
                return True
            time.sleep(0.005)
        return False

    @property
    def alive(self) -> bool:
        return self.holder is not None and self.holder.poll() is None

    def close(self) -> None:
        """End the holder (EOF on its pipe), which ends the tool; tasks still inside keep the namespace."""
        if self.holder is not None:
            for stream in (self.holder.stdin, self.holder.stdout, self.holder.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
            _reap(self.holder)
        if self.tool is not None:
            _reap(self.tool)  # slirp4netns's exit-fd or the holder's SIGTERM has ended it already

    # ----- used by the launcher and the engine -------------------------------------------------
    def enter(self, argv: list[str]) -> list[str]:
        """argv run inside the namespace: nsenter execs it, so the pid and the parent stay the same."""
        user = ["--user", "--preserve-credentials"] if self.support.user_namespace else []
        return ["nsenter", f"--target={self.holder.pid}", "--net", *user, "--", *argv]

    def namespaces(self) -> list[str]:
        """What a process joins to be inside, in order (setns, as `enter`'s nsenter does): a process forked from
        one outside (kwnb/task/forker.py) joins them itself."""
        kinds = ["user", "net"] if self.support.user_namespace else ["net"]
        return [f"/proc/{self.holder.pid}/ns/{kind}" for kind in kinds]

    def probe(self, address: str) -> bool:
        """Whether host:port accepts connections inside the namespace (~0.1 ms: one pipe round trip)."""
        host, _, port = address.rpartition(":")
        return self._ask(f"probe {host} {port}") == "1"

    def free_ports(self, count: int) -> list[int]:
        answer = self._ask(f"ports {count}")
        if not answer:
            raise LaunchError(f"the private network's holder has ended: {self._holder_error()}")
        return [int(port) for port in answer.split()]

    def _ask(self, request: str) -> str:
        """The holder's answer, or "" after ANSWER_SECONDS; an answer that comes later is dropped when read."""
        with self._lock:
            self._asked += 1
            number, deadline = str(self._asked), time.monotonic() + ANSWER_SECONDS
            try:
                self.holder.stdin.write(f"{number} {request}\n".encode())
                self.holder.stdin.flush()
                while True:
                    line = self._read_line(deadline - time.monotonic())
                    answered, _, answer = line.partition(" ")
                    if not line or answered == number:
                        return answer
            except (OSError, ValueError, AttributeError):  # ended, or closed by close()
                return ""

    def _read_line(self, timeout: float) -> str:
        """One line from the holder within `timeout` seconds, else "". Read from the descriptor itself:
        select() on a buffered stream misses a line already in the stream's buffer."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            fd = self.holder.stdout.fileno()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return ""
            chunk = os.read(fd, 65536)
            if not chunk:  # the holder has ended
                return ""
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode(errors="replace").strip()

    def _holder_error(self) -> str:
        if not _ended(self.holder):
            return "no answer"
        return (_said(self.holder.stderr) or f"exit code {self.holder.returncode}")[-300:]


def _ended(process: subprocess.Popen) -> bool:
    """Whether it has ended, allowing a moment: a closed pipe comes just before the exit is reapable."""
    try:
        process.wait(0.5)
        return True
    except subprocess.TimeoutExpired:
        return False


def _said(stream) -> str:
    """A helper's stderr, decoded, on one line (its lines joined by "; ")."""
    try:
        text = stream.read().decode(errors="replace")
    except (OSError, ValueError):  # closed by close()
        return ""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _reap(process: subprocess.Popen, grace: float = 2.0) -> None:
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
