"""Local tasks: subprocesses on this machine, each listening on a free localhost port, on this
machine's network or in a private one of the run's own (netns.py: `--network private|host`)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from typing import Callable

import psutil

from ..machine.ports import HeldPorts
from ..machine.limits import read_limits
from ..machine.neighbours import neighbours
from ..machine.task_env import THREAD_VARIABLES, temp_variables, thread_variables
from ..errors import LaunchError
from ..task.process_group import OWN_PROCESS_GROUP
from ..task.tf_config import TaskId
from ..task.runfolder import DESCRIPTION, write_description
from . import netns, network_choice, shared_import, warm_room
from . import warm as warm_pool
from .base import Launcher, Sample, TaskLaunch, TaskProcess
from .catalog import LOCAL_ARGUMENTS
from .network_choice import NETWORK_ENV  # noqa: F401  (where callers have always found it)

_children: dict[int, list[int]] = {}  # ppid -> pids, of every process on the machine
_children_at = float("-inf")
_children_lock = threading.Lock()


def _descendant_pids(pid: int, fresh: bool = False) -> list[int]:
    """Every descendant of `pid`, from one table of the machine's processes that all tasks share, made at
    most once a second: psutil's children() walks all of /proc on each call, so 64 tasks each polled once
    a second cost 64 walks a second, and each walk grows with the tasks too (issue 22)."""
    global _children, _children_at
    with _children_lock:
        if fresh or time.monotonic() - _children_at >= 1.0:
            table: dict[int, list[int]] = {}
            for process in psutil.process_iter(["ppid"]):
                table.setdefault(process.info["ppid"], []).append(process.pid)
            _children, _children_at = table, time.monotonic()
        children = _children
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


class LocalProcess(TaskProcess):
    def __init__(self, popen: "subprocess.Popen | shared_import.ForkedPopen", probe: Callable[[str], bool] | None = None,
                 warm: bool = False):
        self._popen = popen  # a forked task's (shared_import.py) has no pid until its forker's import is done
        self.warm = warm  # it started in a warm interpreter (backends/warm.py)
        self.probe = probe  # a private network's: the engine is outside it and cannot connect (engine/tasks/task.py)
        self._descendants: dict[int, psutil.Process] = {}
        self._descendants_at = float("-inf")

    @property
    def pid(self) -> int | None:
        return self._popen.pid

    def poll(self) -> int | None:
        # psutil walks all of /proc for children(): at most once a second, which still catches any
        # child that lives longer than that (killpg reaches the rest through the process group).
        if self._popen.returncode is None and self.pid and time.monotonic() - self._descendants_at >= 1.0:
            self._descendants_at = time.monotonic()
            self._remember_descendants()
        return self._popen.poll()

    def _remember_descendants(self, fresh: bool = False) -> None:
        # Children that leave the worker's process group would escape killpg; psutil finds them,
        # but only while the worker lives, so they are noted on every poll.
        for pid in _descendant_pids(self.pid, fresh):
            if pid not in self._descendants:
                try:
                    self._descendants[pid] = psutil.Process(pid)
                except psutil.Error:
                    pass

    def sample(self) -> Sample | None:
        if self._popen.returncode is not None or self.pid is None:
            return None
        try:
            main = psutil.Process(self.pid)
            with main.oneshot():
                rss, cpu = main.memory_info().rss, sum(main.cpu_times()[:2])
                stopped = main.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
        except psutil.Error:
            return None
        for child in list(self._descendants.values()):
            try:
                rss, cpu = rss + child.memory_info().rss, cpu + sum(child.cpu_times()[:2])
            except psutil.Error:
                pass
        return Sample(rss=rss, stopped=stopped, cpu=cpu)

    def signal_task(self, signum: int) -> None:
        if self.pid is None:
            return  # not forked yet: no stacks to ask for
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def signal(self, signum: int) -> None:
        if self._popen.returncode is None and self.pid is None:
            self._popen.cancel(signum)  # its forker has not forked it yet: it will not
        elif self._popen.returncode is None:
            self._remember_descendants(fresh=True)  # fresh at the moment it matters, whatever the poll throttle
            try:
                os.killpg(self.pid, signum)  # the worker leads its own group: its children go too
            except ProcessLookupError:
                pass
        for child in list(self._descendants.values()):
            try:
                child.send_signal(signum)  # psutil checks the pid was not reused
            except psutil.Error:
                self._descendants.pop(child.pid, None)
        if signum == signal.SIGKILL:
            self._popen.wait()


class LocalLauncher(Launcher):
    """Subprocesses on this machine, each listening on a free localhost port."""

    name = "local"
    runs_here = True
    arguments = LOCAL_ARGUMENTS  # declared in catalog.py, so that listing options imports no backend
    # Class defaults too, immutable, so that a subclass which skips __init__ still works.
    network: str | None = None  # None: network_choice.choose decides for this machine
    said_by = ""  # who asked for `network`: --network or $KWNB_NETWORK
    chosen: str | None = None  # what the first launch settled on
    private: netns.PrivateNetwork | None = None  # shared by every task this launcher starts in it
    _inside: tuple[LocalProcess, ...] = ()
    _notes: tuple[str, ...] = ()
    warm = False
    _launches: tuple = ()
    _held: HeldPorts | None = None  # the ports of the latest addresses(), until its tasks start
    _threads: tuple = ()  # the thread variables every task of the latest launch gets, as (name, value) pairs
    _shared: shared_import.SharedImport | None = None  # the forker of the latest launch's tasks (shared_import.py)
    _shared_imports: tuple = ()  # what it imports, () when the latest launch's tasks start cold
    _held_back: frozenset = frozenset()  # what the latest launch's tasks must import themselves (warm_room.held_back)

    def __init__(self, network: str | None = None, warm: bool | None = None):
        self.network, self.said_by = network_choice.wanted(network)  # the environment sets a default
        self.warm = warm_pool.POOL.enabled() if warm is None else bool(warm)

    def check(self) -> None:
        if self.network == "private" and not netns.support().possible:
            raise LaunchError(f"--network private cannot work here: {netns.support().forbidden_by}")

    def addresses(self, tasks: list[TaskId]) -> list[str]:
        if self._choose(tasks) == "private":
            return [f"localhost:{port}" for port in self._namespace().free_ports(len(tasks))]
        self._release_ports()
        self._held = HeldPorts(len(tasks))  # until the tasks start (start_all)
        return [f"localhost:{port}" for port in self._held.ports]

    def _release_ports(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None

    def _choose(self, tasks: list[TaskId]) -> str:
        ps = network_choice.coordinated_here([task.type for task in tasks])  # not under --chief: the chief does
        if self.chosen is None:
            found, others = netns.support(), neighbours()
            choice = network_choice.choose(self.network, self.said_by, ps, found, others)
            self.chosen = choice.network
            if self.chosen == "private":
                self._notes += tuple(network_choice.private_notes(found))
            else:
                self._notes += tuple(note for note in [network_choice.host_note(choice, found, others, ps)] if note)
        if ps and self.chosen == "private":
            raise LaunchError("the notebook coordinates ps tasks and must reach them: use --network host")
        return self.chosen

    def _namespace(self) -> netns.PrivateNetwork:
        if self.private is None or not self.private.alive:
            # A network the warm pool made ahead, with interpreters waiting in it, else a new one.
            adopted = warm_pool.POOL.claim_network() if self.warm else None
            self.private = adopted or netns.PrivateNetwork().start()
            if self.private.tool_error:
                self._notes += (network_choice.tool_failed_note(self.private.tool_error),)
        return self.private

    def start_all(self, launches: list[TaskLaunch]) -> list[TaskProcess]:
        self._release_ports()  # the tasks bind them now
        warm_pool.POOL.run_started(self)  # cold runs too: the pool must not import TensorFlow beside them
        if self.warm and all(map(warm_pool.can_serve, launches)):
            self._launches = launches  # what to prepare warm interpreters for, once the run ends
        if launches:
            limits = read_limits()
            self._threads = tuple(thread_variables(launches[0].env, len(launches), limits.cpus).items())
            _record_threads(launches[0].log_path.parent, dict(self._threads), len(launches), limits)
            pool_memory = warm_pool.POOL.memory() if self.warm else 0
            warning = warm_room.fit_warning(launches[0].script, len(launches), pool_memory, limits)
            self._notes += (warning,) if warning else ()
        self._held_back = warm_room.held_back(launches[0].script, launches[0].env) if launches else frozenset()
        self._shared_imports = shared_import.shareable(launches) if shared_import.enabled() else ()
        return super().start_all(launches)  # all or none; the run's finish() then releases the pool

    def start(self, launch: TaskLaunch) -> TaskProcess:
        launch.env.update(self._threads)  # before the warm pool's key is taken: it includes them
        launch.env.update(temp_variables(launch.env))  # the same folder every run: the key stays the same
        inside = self.chosen == "private"
        ahead = warm_pool.can_serve(launch)  # a process started ahead may stand in for the task's
        popen = warm_pool.POOL.take(launch, self._held_back, self._namespace() if inside else None) \
            if self.warm and ahead else None
        warm = popen is not None
        if popen is None and self._shared_imports and ahead:
            popen = self._forker(launch).fork(launch, self._namespace().namespaces() if inside else ())
        if popen is None:
            popen = self._popen(self._namespace().enter(launch.argv) if inside else launch.argv, launch)
        if not inside:
            return LocalProcess(popen, warm=warm)
        process = LocalProcess(popen, probe=self.private.probe, warm=warm)
        self._inside += (process,)
        return process

    def _forker(self, launch: TaskLaunch) -> shared_import.SharedImport:
        """The forker of this launch's tasks: the one kept from the process's last run if it can serve them, else
        a new one, started with the first task (a restart forks from it too)."""
        key = warm_pool.key(launch.python, launch.env)
        if self._shared is not None and (self._shared.key != key or not self._shared.alive):
            self._shared.close()  # another run's, in another environment: it ends once its own tasks have
            self._shared = None
        if self._shared is None:
            self._shared = shared_import.take(key, self._held_back) or shared_import.SharedImport(
                launch.python, launch.env, launch.cwd, self._shared_imports)
        return self._shared

    @staticmethod
    def _popen(argv: list[str], launch: TaskLaunch) -> subprocess.Popen:
        with open(launch.log_path, "ab", buffering=0) as log:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=launch.env, cwd=launch.cwd, **OWN_PROCESS_GROUP)

    def finish(self) -> list[str]:
        """End the private network once none of its tasks lives (a launcher given to several runs shares it);
        let the warm pool prepare for the next run."""
        warm_pool.POOL.run_ended(self, list(self._launches) if self.warm else [], private=self.chosen == "private")
        if self._shared is not None and self.warm:
            self._shared.close(wait=2.0)  # it exits at once (its tasks have ended): the pool prepares the next run
        elif self._shared is not None:
            shared_import.keep(self._shared)  # for the process's next run (shared_import.py)
        self._shared = None
        if self.private is not None and all(process.poll() is not None for process in self._inside):
            self.private.close()
            self.private, self._inside = None, ()
        return self.take_notes()

    def take_notes(self) -> list[str]:
        notes, self._notes = list(self._notes), ()
        return notes


def _record_threads(run_dir, threads: dict[str, str], tasks: int, limits) -> None:
    """Say in the run's description (run.json) which thread variables kwnb set, and why."""
    path = run_dir / DESCRIPTION
    try:
        description = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    description["threads"] = {"set": threads, "why": (
        f"{limits.cpus:g} CPU{'s' * (limits.cpus != 1)} ({limits.cpus_source}) shared by {tasks} tasks" if threads else
        "not set by kwnb: the environment sets one of " + ", ".join(THREAD_VARIABLES))}
    write_description(run_dir, description)


