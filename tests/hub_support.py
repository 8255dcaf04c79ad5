"""A private JupyterHub for the workshop tests: N learners as Unix users, on loopback, torn down by pid.

`start(learners)` makes the learners with useradd, writes nothing but its own temporary folder (database,
cookie secret, pid files, the hub's log), and starts `jupyterhub -f tests/hub_config.py` on free ports, with
configurable-http-proxy from the project's node prefix (`make setup` installs it under .venv/node) or the PATH.
`Hub.stop()` ends the hub (which stops the servers and the proxy), then every process it or a learner left, by
pid, removes the learners' cgroups and accounts and the folder. Nothing needs root but this module; it skips
(HubUnavailable, saying why) where something is missing.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import portpicker
import psutil

import readable_copy

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONFIG = TESTS / "hub_config.py"
LEARNER_PREFIX = "kwnbl"  # learners are kwnbl<pid>x<n>: short (useradd), and this session's own


class HubUnavailable(Exception):
    """Why no test hub can start here (the tests skip with it)."""


def proxy_command() -> str | None:
    """configurable-http-proxy: the project's own (`make setup` installs it with npm under .venv/node), or the PATH's."""
    local = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.exists() else shutil.which("configurable-http-proxy")


def check_prerequisites() -> None:
    from hub_spawner import cgroup_version

    if os.geteuid() != 0:
        raise HubUnavailable("the hub test makes Unix users and cgroups, which needs root")
    if importlib.util.find_spec("jupyterhub") is None:
        raise HubUnavailable("jupyterhub is not installed (pip install -e '.[test]')")
    if proxy_command() is None:
        raise HubUnavailable("no configurable-http-proxy: `make setup` installs it with npm under .venv/node "
                             "(needs nodejs and npm: `make system-deps`)")
    for tool in ("useradd", "userdel"):
        if shutil.which(tool) is None:
            raise HubUnavailable(f"no {tool} to make the learners")
    if cgroup_version() is None:
        raise HubUnavailable("no cgroup v1 (memory, cpu, cpuacct) or v2 (memory, cpu) to limit the learners")


@dataclass
class Learner:
    name: str
    uid: int
    home: Path

    def processes(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["uids"]):
            uids = process.info["uids"]
            if uids is not None and self.uid in (uids.real, uids.effective):
                found.append(process)
        return found


@dataclass
class Hub:
    folder: Path
    url: str  # the proxy's public side, e.g. http://127.0.0.1:PORT
    token: str  # the organiser service's token
    password: str  # every learner's (the dummy authenticator)
    learners: list[Learner]
    process: subprocess.Popen
    _tokens: dict[str, str] = field(default_factory=dict)
    _stopped: bool = False

    def api(self, method: str, path: str, **kwargs):
        import requests

        response = requests.request(method, f"{self.url}/hub/api/{path}", timeout=60,
                                    headers={"Authorization": f"token {self.token}"}, **kwargs)
        response.raise_for_status()
        return response.json() if response.content else None

    def user_token(self, name: str) -> str:
        """A token of the learner's own, as JupyterLab holds one: it reaches that learner's server only."""
        if name not in self._tokens:
            made = self.api("POST", f"users/{name}/tokens", json={"note": "kwnb hub test"})
            self._tokens[name] = made["token"]
        return self._tokens[name]

    def start_server(self, name: str, timeout: float = 150) -> str:
        """Spawn the learner's server and wait until it answers; returns its URL through the proxy."""
        self.api("POST", f"users/{name}/server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            user = self.api("GET", f"users/{name}")
            server = user.get("servers", {}).get("", {})
            if server.get("ready"):
                return f"{self.url}/user/{name}/"
            if not user.get("pending") and not server:
                raise RuntimeError(f"{name}'s server did not start; the hub's log: {self.log_tail()}")
            time.sleep(0.5)
        raise TimeoutError(f"{name}'s server not ready in {timeout:.0f} s; the hub's log: {self.log_tail()}")

    def stop_server(self, name: str, timeout: float = 60) -> None:
        self.api("DELETE", f"users/{name}/server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.api("GET", f"users/{name}").get("servers"):
            time.sleep(0.3)

    def log_tail(self, chars: int = 3000) -> str:
        log = self.folder / "jupyterhub.log"
        return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"

    def stop(self) -> None:
        """End the hub, then anything left by pid: the proxy, the learners' processes; the groups, users, folder.
        Once: the pids are not looked at again, so a later call cannot hit a process that reused one."""
        if self._stopped:
            return
        self._stopped = True
        _end(self.process.pid, graceful=True)
        for pid_file in ("proxy.pid", "jupyterhub.pid"):
            try:
                _end(int((self.folder / pid_file).read_text()), graceful=False)
            except (OSError, ValueError):
                pass
        for learner in self.learners:
            for process in learner.processes():
                _end(process.pid, graceful=False)
        _remove_groups([learner.name for learner in self.learners])
        _remove_users([learner.name for learner in self.learners])
        shutil.rmtree(self.folder, ignore_errors=True)


def _end(pid: int, graceful: bool, seconds: float = 30) -> None:
    """SIGTERM (if graceful) then SIGKILL, and wait for the pid to go."""
    try:
        process = psutil.Process(pid)
        if graceful:
            process.send_signal(signal.SIGTERM)
            process.wait(seconds)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        pass
    try:
        process.kill()
        process.wait(10)
    except psutil.NoSuchProcess:
        pass


def _remove_groups(names: list[str]) -> None:
    from hub_spawner import group_paths

    for name in names:
        for group in group_paths(name):
            if not group.exists():
                continue
            for pid in (group / "cgroup.procs").read_text().split():
                _end(int(pid), graceful=False)
            deadline = time.monotonic() + 10
            while group.exists() and time.monotonic() < deadline:
                try:
                    group.rmdir()
                except OSError:
                    time.sleep(0.2)


def _remove_stale() -> None:
    """What a killed session left: learners whose session's pid (in their name) is gone, their groups too."""
    import pwd
    import re

    for entry in pwd.getpwall():
        made_by = re.fullmatch(rf"{LEARNER_PREFIX}(\d+)x\d+", entry.pw_name)
        if made_by and not psutil.pid_exists(int(made_by[1])):
            learner = Learner(entry.pw_name, entry.pw_uid, Path(entry.pw_dir))
            for process in learner.processes():
                _end(process.pid, graceful=False)
            _remove_groups([learner.name])
            _remove_users([learner.name])


def _make_users(count: int) -> list[Learner]:
    import pwd

    learners = []
    try:
        for number in range(count):
            name = f"{LEARNER_PREFIX}{os.getpid()}x{number}"
            subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name],
                           check=True, capture_output=True, text=True)
            entry = pwd.getpwnam(name)
            learners.append(Learner(name, entry.pw_uid, Path(entry.pw_dir)))
    except (subprocess.CalledProcessError, KeyError) as error:
        _remove_users([learner.name for learner in learners])
        raise HubUnavailable(f"useradd failed: {getattr(error, 'stderr', error)}") from None
    return learners


def _remove_users(names: list[str]) -> None:
    for name in names:
        subprocess.run(["userdel", "--remove", "--force", name], capture_output=True)


def start(learners: int = 3, mem_limit: str = "2G", cpu_limit: float = 1, timeout: float = 90) -> Hub:
    """A running hub with `learners` learners (their servers not started yet); HubUnavailable if it cannot be."""
    check_prerequisites()
    _remove_stale()
    folder = Path(tempfile.mkdtemp(prefix="kwnb-hub-"))
    made = _make_users(learners)
    ports = [portpicker.pick_unused_port() for _ in range(3)]
    token, password = secrets.token_hex(16), secrets.token_hex(8)
    env = {**os.environ, "KWNB_HUB_FOLDER": str(folder), "KWNB_HUB_USERS": ",".join(l.name for l in made),
           "KWNB_HUB_PORT": str(ports[0]), "KWNB_HUB_API_PORT": str(ports[1]), "KWNB_HUB_PROXY_API_PORT": str(ports[2]),
           "KWNB_HUB_CHP": proxy_command(), "KWNB_HUB_TOKEN": token, "KWNB_HUB_PASSWORD": password,
           "KWNB_HUB_MEM_LIMIT": mem_limit, "KWNB_HUB_CPU_LIMIT": str(cpu_limit), "KWNB_HUB_PYTHONPATH": str(ROOT)}
    env.pop("PYTHONPATH", None)  # the hub needs none; the servers get KWNB_HUB_PYTHONPATH
    command = _reach_python(folder) + [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG)]
    with open(folder / "jupyterhub.log", "w") as log:
        process = subprocess.Popen(command, cwd=folder, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(folder, f"http://127.0.0.1:{ports[0]}", token, password, made, process)
    atexit.register(hub.stop)  # should the session end without its teardown (stop() twice does nothing more)
    try:
        _wait_answering(hub, timeout)
    except BaseException:
        hub.stop()
        raise
    return hub


def _reach_python(folder: Path) -> list[str]:
    """A prefix that starts the hub in a mount namespace of its own where the learners can reach the Python
    and this checkout (pyenv under /root, mode 700, on the test machine; a clone in a mode-700 folder):
    readable_copy.reach_steps."""
    needed = [Path(sys.executable), Path(sys.prefix), ROOT / "kwnb", TESTS]  # the servers import kwnb from ROOT
    steps = readable_copy.reach_steps(needed, folder)
    if not steps:
        return []
    if shutil.which("unshare") is None:
        blocked = next(iter(readable_copy.closed_folders(needed)))
        raise HubUnavailable(f"the learners cannot enter {blocked} to reach the Python, and there is no "
                             "unshare to give them a way in")
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", steps + ' && exec "$@"', "sh"]


def _wait_answering(hub: Hub, timeout: float) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hub.process.poll() is not None:
            raise HubUnavailable(f"jupyterhub exited with {hub.process.returncode}: {hub.log_tail()}")
        try:
            if requests.get(f"{hub.url}/hub/api/", timeout=5).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise HubUnavailable(f"jupyterhub did not answer in {timeout:.0f} s: {hub.log_tail()}")
