"""Ray: each task a process hosted by a Ray actor, the actors gang-placed through one placement group.

`addresses` joins the cluster (`ray.init(address=...)`, or the one this process joined already), makes a
placement group of one bundle per task (PACK, or with --spread one task per node) and one actor per bundle
(task/ray_host.py), each holding a port on its node: TF_CONFIG is made from the addresses they report, by
the engine, as for every backend. A task's output lives on its node and is read back through its actor
into the task's log here, which kwnb's one reader follows (no shared filesystem is assumed). A stop
ends the task's process group (TERM, then KILL), then the actor, then, once every task ended, the group.
"""
from __future__ import annotations

import atexit
import functools
import os
import signal
import socket
import threading
import time
import weakref
from pathlib import Path

from ..errors import OptionError
from ..machine.ports import free_ports
from ..task.ray_host import TaskHost
from ..task.runfolder import grows
from ..task.tf_config import TaskId
from . import network_choice
from .base import Launcher, LaunchError, Sample, TaskLaunch, TaskProcess
from .catalog import RAY_ARGUMENTS, RAY_INSTALL
from . import ray_words

try:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError:  # the option says how to install it (check)
    ray = None

CONNECT_SECONDS = 5.0  # a head that does not accept a TCP connection by then is not there (ray.init would retry ~60 s)
PLACEMENT_SECONDS = 30.0  # resources that exist but are busy: how long to wait for them before refusing
ACTOR_SECONDS = 60.0  # an actor's start on its node (a new worker process importing kwnb)
CALL_SECONDS = 10.0  # one call to a live actor (a read, a signal)
# The supervisor polls every 0.1 s; a read is a round trip to the task's actor on its node, so a task is read at
# most this often: output and exits reach the kernel up to 0.5 s later, and the driver makes 2 calls a second per
# task, not 10 (benchmarks/ray_train.py: kwnb's driver took 2.2-2.5 times Ray Train's CPU polling at 10).
READ_SECONDS = 0.5
_LAUNCHERS: "weakref.WeakSet[RayLauncher]" = weakref.WeakSet()  # what the exit handler tidies


class Host(TaskHost):
    """The actor: the task side's TaskHost, plus where Ray placed it."""

    def node(self) -> str:
        return ray.util.get_node_ip_address()


class RayLauncher(Launcher):
    """Tasks on a Ray cluster, each supervised by an actor in one bundle of the run's placement group."""

    name = "ray"
    arguments = RAY_ARGUMENTS  # declared in catalog.py, so that listing options imports no backend

    def __init__(self, address: str | None = None, spread: bool | None = None, cpus_per_task: float | None = None,
                 gpus_per_task: float | None = None):
        for flag, value in (("--cpus-per-task", cpus_per_task), ("--gpus-per-task", gpus_per_task)):
            if value is not None and value < 0:
                raise OptionError(f"{flag} must be 0 or more, not {value:g}")
        self.address = address
        self.spread = bool(spread)
        self.cpus = 1.0 if cpus_per_task is None else float(cpus_per_task)
        self.gpus = float(gpus_per_task or 0)
        self.group = None  # the placement group of the latest launch
        self.bundles: dict[TaskId, int] = {}  # which bundle of the group holds each task
        self.hosts: dict[TaskId, object] = {}  # each task's live actor
        self.ports: dict[TaskId, int] = {}  # each task's port on its node: a restarted task's new actor holds it again
        self.nodes: dict[TaskId, str] = {}  # the node in each task's address, which its peers' TF_CONFIG names
        self.tasks: list[RayTask] = []
        self._notes: list[str] = []
        _LAUNCHERS.add(self)

    def check(self) -> None:
        if ray is None:
            raise LaunchError(f'--backend ray needs Ray, which is not installed here: {RAY_INSTALL}')

    # ----- placing the tasks --------------------------------------------------------------------
    def addresses(self, tasks: list[TaskId]) -> list[str]:
        self._connect()
        coordinated = network_choice.coordinated_here([task.type for task in tasks])
        members = tasks[:-1] if coordinated else tasks  # the notebook's own chief entry comes last
        self._release_hosts()  # a relaunch: the last launch's actors go before new ones take their bundles
        if self.group is None or len(self.bundles) != len(members):
            self._remove_group()
            self.group = self._place(len(members))
        self.bundles = {task: index for index, task in enumerate(members)}
        hosts = [self._host(index) for index in range(len(members))]
        try:
            nodes = ray.get([host.node.remote() for host in hosts], timeout=ACTOR_SECONDS)
            ports = ray.get([host.reserve.remote() for host in hosts], timeout=ACTOR_SECONDS)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as error:
            for host in hosts:
                ray.kill(host)
            raise LaunchError(ray_words.actor_failed(error)) from error
        self.hosts = dict(zip(members, hosts))
        self.ports = dict(zip(members, ports))
        self.nodes = dict(zip(members, nodes))
        self._notes.append(ray_words.placed(members, nodes, self.spread))
        here = [f"{ray.util.get_node_ip_address()}:{free_ports(1)[0]}"] if coordinated else []
        return [f"{node}:{port}" for node, port in zip(nodes, ports)] + here

    def _connect(self) -> None:
        address = self.address or os.environ.get("RAY_ADDRESS") or "auto"
        if address != "auto" and not address.startswith("ray://"):
            reachable(address)
        if ray.is_initialized():  # the cluster this process joined already (the notebook's own ray.init)
            joined = ray.get_runtime_context().gcs_address
            if self.address and self.address not in ("auto", joined):
                raise LaunchError(f"this Python has joined the Ray cluster at {joined} already, not {self.address}: "
                                  f"leave out --address, or call ray.shutdown() first")
            return
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)
        except ConnectionError as error:
            raise LaunchError(ray_words.no_cluster(address, error)) from error
        except RuntimeError as error:
            raise LaunchError(ray_words.init_failed(address, error)) from error

    def _place(self, count: int):
        bundle = {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {})}
        strategy = "STRICT_SPREAD" if self.spread else "PACK"
        refusal = ray_words.infeasible(bundle, count, strategy, ray.nodes())
        if refusal:
            raise LaunchError(refusal)
        group = placement_group([dict(bundle) for _ in range(count)], strategy=strategy, name="kwnb")
        if not group.wait(timeout_seconds=PLACEMENT_SECONDS):
            remove_placement_group(group)
            raise LaunchError(ray_words.busy(bundle, count, strategy, PLACEMENT_SECONDS, ray.available_resources()))
        return group

    def _host(self, index: int):
        strategy = PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=index)
        return _remote_host().options(num_cpus=self.cpus, num_gpus=self.gpus, scheduling_strategy=strategy,
                                        max_restarts=0).remote()

    # ----- starting them ------------------------------------------------------------------------
    def start(self, launch: TaskLaunch) -> TaskProcess:
        host = self.hosts.get(launch.task)
        if host is None:
            host = self.hosts[launch.task] = self._rehost(launch.task)
        script = Path(launch.script)
        files = {path.name: path.read_bytes() for path in [script, *_helpers(launch)] if path.is_file()}
        env = {key: value for key, value in launch.env.items() if os.environ.get(key) != value}  # kwnb's and the user's
        try:
            pid = ray.get(host.start.remote(launch.python, [launch.script, *launch.args], env, launch.cwd, files),
                          timeout=ACTOR_SECONDS)
            node = ray.get(host.node.remote(), timeout=CALL_SECONDS)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as error:
            raise LaunchError(f"could not start {launch.task}: {ray_words.actor_failed(error)}") from error
        task = RayTask(self, launch, host, pid, node)
        self.tasks.append(task)
        return task

    def _rehost(self, task: TaskId):
        """A restart of one task: a new actor in its bundle, on the node its address names, holding its port.
        Where Ray lost that node, the bundle would wait for room elsewhere (or get it, at an address none of
        the peers knows): refused at once, as only a restart of the whole run places every task afresh."""
        node = self.nodes[task]
        if not any(alive.get("Alive") and alive.get("NodeManagerAddress") == node for alive in ray.nodes()):
            raise LaunchError(ray_words.node_gone(task, node))
        host = self._host(self.bundles[task])
        try:
            ray.get(host.reserve.remote(self.ports[task]), timeout=ACTOR_SECONDS)
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as error:
            ray.kill(host)
            raise LaunchError(f"could not restart {task}: {ray_words.actor_failed(error)}") from error
        return host

    def forget(self, task: "RayTask") -> None:
        """The task is over and its actor gone: the bundle is free for a restart's new actor."""
        if self.hosts.get(task.launch.task) is task.host:
            del self.hosts[task.launch.task]

    # ----- ending ---------------------------------------------------------------------------------
    def take_notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    def finish(self) -> list[str]:
        """Every task has ended: their actors, then the placement group."""
        self._release_hosts()
        self._remove_group()
        return self.take_notes()

    def _release_hosts(self) -> None:
        for task in [task for task in self.tasks if task.host in self.hosts.values()]:
            task.stop(grace=0.5)
        for host in self.hosts.values():
            ray.kill(host)
        self.hosts = {}

    def _remove_group(self) -> None:
        if self.group is not None:
            try:
                remove_placement_group(self.group)
            except Exception:  # already gone with its cluster
                pass
            self.group = None

    def close(self) -> None:
        """Nothing of this launcher's left running (the exit handler's step, also after a failed launch)."""
        if ray is not None and ray.is_initialized():
            self._release_hosts()
            self._remove_group()


class RayTask(TaskProcess):
    """One task: its process on a node, seen through its actor."""

    def __init__(self, launcher: RayLauncher, launch: TaskLaunch, host, pid: int, node: str):
        self.launcher, self.launch, self.host, self.pid, self.node = launcher, launch, host, pid, node
        self.offset = 0  # bytes of the task's output copied into its log here
        self.files_seen: dict[str, tuple[int, int]] = {}  # what of the task's run folder files is here (ray_host.files)
        self.code: int | None = None
        self.lost = ""  # why the actor died under the task, in words (a lost node, Ray's memory monitor)
        self.last_sample: Sample | None = None
        self.read_at = float("-inf")  # time.monotonic() of the last read
        self.lock = threading.Lock()  # the supervisor polls while a stopper's thread stops

    def poll(self, every: float = READ_SECONDS) -> int | None:
        """The exit code, or None while it runs; its actor is asked again once `every` seconds have passed."""
        with self.lock:
            if self.code is None and time.monotonic() - self.read_at >= every:
                self.read_at = time.monotonic()
                self._read()
            return self.code

    def _read(self) -> None:
        try:
            data, code, sample, files = ray.get(self.host.read.remote(self.offset, self.files_seen),
                                                timeout=CALL_SECONDS)
        except ray.exceptions.GetTimeoutError:
            return  # a busy node: read again next time
        except ray.exceptions.ActorUnavailableError:
            return  # Ray says it may come back
        except ray.exceptions.RayActorError as error:
            self._died(error)
            return
        if data:
            with open(self.launch.log_path, "ab") as log:
                log.write(data)
            self.offset += len(data)
        self._copy(files)
        self.last_sample = Sample(rss=sample[0], stopped=False, cpu=sample[1]) if sample else None
        self.code = code

    def _copy(self, files: dict) -> None:
        """The task's run folder files that changed on its node, into the run folder here: a file that grows
        is appended to (a restarted task's rows follow the last attempt's, as with a shared folder)."""
        folder = self.launch.log_path.parent
        for name, (start, data, marker) in files.items():
            with open(folder / Path(name).name, "ab" if grows(name) or start else "wb") as copy:
                copy.write(data)
            self.files_seen[name] = marker

    def fetch_files(self) -> None:
        self.poll(every=0)

    def _died(self, error) -> None:
        """The actor died under its task (its node, Ray's memory monitor): the task is gone with it."""
        self.lost = ray_words.actor_died(self.launch.task, self.node, error)
        with open(self.launch.log_path, "ab") as log:
            log.write(f"\n{self.lost}\n".encode())
        self.code = -signal.SIGKILL
        self.launcher.forget(self)

    def sample(self) -> Sample | None:
        return self.last_sample

    def signal(self, signum: int) -> None:
        self._call("signal", signum)

    def signal_task(self, signum: int) -> None:
        self._call("signal", signum, False)

    def _call(self, method: str, *args) -> None:
        if self.code is not None and self.host not in self.launcher.hosts.values():
            return
        try:
            ray.get(getattr(self.host, method).remote(*args), timeout=CALL_SECONDS)
        except ray.exceptions.RayActorError:
            pass  # the actor and, through its watchdog, the task are gone
        except ray.exceptions.GetTimeoutError:
            pass  # the next poll sees what happened

    def stop(self, grace: float = 3.0) -> None:
        """The task's process group, TERM then KILL (TensorFlow catches TERM), its last output, then its actor."""
        super().stop(grace)
        for _ in range(100):  # every byte up to its exit: a read takes at most MAX_READ
            if self.poll(every=0) is not None:
                break
        with self.lock:
            if self.code is None:
                self.code = -signal.SIGKILL
            if self.host in self.launcher.hosts.values():
                ray.kill(self.host)
                self.launcher.forget(self)

    def where(self) -> str:
        return f"node {self.node}, pid {self.pid}"


def reachable(address: str) -> None:
    """A LaunchError unless the head's address accepts a TCP connection (ray.init would retry for a minute)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise LaunchError(f"--address must be HOST:PORT of a Ray head (e.g. 10.0.0.5:6379), or auto, not {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as error:
        raise LaunchError(ray_words.no_cluster(address, error)) from None


def _helpers(launch: TaskLaunch) -> list[Path]:
    """The job's helper modules kept in the run's folder beside the script (the run copied them there)."""
    folder = launch.log_path.parent
    return [path for path in folder.glob("*.py")]


@functools.cache
def _remote_host():
    return ray.remote(Host)


@atexit.register
def _close_all() -> None:
    """The kernel or script is ending: no task, actor or placement group of its runs outlives it."""
    for launcher in list(_LAUNCHERS):
        try:
            launcher.close()
        except Exception:
            pass
