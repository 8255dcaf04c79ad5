"""Local tasks: subprocesses on this machine, each listening on a free localhost port."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil

from ..engine.cluster import free_ports
from ..task.tf_config import TaskId
from .base import Launcher, Sample, TaskLaunch, TaskProcess

class LocalProcess(TaskProcess):
    def __init__(self, popen: subprocess.Popen):
        self._popen = popen
        self.pid = popen.pid
        self._descendants: dict[int, psutil.Process] = {}
        self._descendants_at = float("-inf")

    def poll(self) -> int | None:
        # psutil walks all of /proc for children(): at most once a second, which still catches any
        # child that lives longer than that (killpg reaches the rest through the process group).
        if self._popen.returncode is None and time.monotonic() - self._descendants_at >= 1.0:
            self._descendants_at = time.monotonic()
            self._remember_descendants()
        return self._popen.poll()

    def _remember_descendants(self) -> None:
        # Children that leave the worker's process group would escape killpg; psutil finds them,
        # but only while the worker lives, so they are noted on every poll.
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                self._descendants.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def sample(self) -> Sample | None:
        if self._popen.returncode is not None:
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
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def signal(self, signum: int) -> None:
        if self._popen.returncode is None:
            self._remember_descendants()  # fresh at the moment it matters, whatever the poll throttle
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

    def addresses(self, tasks: list[TaskId]) -> list[str]:
        return [f"localhost:{port}" for port in free_ports(len(tasks))]

    def start(self, launch: TaskLaunch) -> TaskProcess:
        with open(launch.log_path, "ab", buffering=0) as log:
            popen = subprocess.Popen(
                launch.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=launch.env,
                cwd=launch.cwd,
                **OWN_PROCESS_GROUP,
            )
        return LocalProcess(popen)


# Each worker leads a process group of its own, so stop() reaches its children and a Ctrl-C meant for
# the terminal does not. Not a session of its own: Linux shares CPU between sessions first
# (autogroups), and workers in their own sessions trained 5 % slower than workers sharing the
# launcher's session in a paired benchmark (benchmarks/README.md).
OWN_PROCESS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
