"""One task of a run (a worker, a ps, a chief) across restarts: its process, its log and what was read from it.

The supervisor reads a task in two halves, so that views are never kept waiting by a slow process
call: `observe()` does the I/O (new log bytes, the process's state, which under Slurm means squeue,
the port probe) without the run's state lock; `apply()` then updates what views read, under it.
The log is read by the task's one reader (engine/readers/output.py), whose first sink is the task itself
(its metrics and signals) and whose others are the outputs the run was given (`kwnb run`'s terminal).
"""
from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ...backends.base import Sample, TaskProcess
from ...task.runfolder import RunFolder
from ...task.tf_config import TaskId, address_of
from ..readers import jax_messages as jax
from ..readers import tf_messages as tf
from ..readers.tf_events import NativeCrash
from ..readers.follow import FileFollower
from ..readers.metrics import MetricsParser
from ..readers.output import Lines, TaskOutput
from ..readers.screen import TerminalScreen
from .status import Status, task_status
from .vitals import Vitals, last_step, phase_of

PORT_PROBE_SECONDS = 0.05  # a local connect answers in well under a millisecond; a remote node in a few
SAMPLE_SECONDS = 1.0  # memory and state: psutil costs ~1 ms a look; once a second is enough for a peak
# A read of the process's state that fails (a /proc read's EIO, a busy squeue) is looked at again at the next
# poll; only when it has failed for this long does the error end the run (the supervisor stops every task).
READ_ERROR_SECONDS = 3.0


@dataclass
class Observation:
    """What one look at a task found, before it is applied."""

    text: str = ""
    reported: str = ""
    returncode: int | None = None
    tf_config: dict | None = None
    queued: bool = False
    port_open: bool = False
    sample: Sample | None = None
    tf_config_set: dict | None = None
    pid: int | None = None  # a forked task's, once its forker has forked it (backends/shared_import.py)


@dataclass
class Signals:
    """What one attempt of a task showed, for the diagnoses (engine/diagnoses/diagnose.py); reset at each start."""

    server_at: float | None = None  # its gRPC server is up (JAX: initialize() began): it is joining
    connected_at: float | None = None  # its coordination agent reached the service (JAX: Gloo connected): joined
    waiting: tf.WaitingForPeers | None = None  # the latest count (logged by the coordination leader only)
    waiting_at: float | None = None  # when the leader's current wait began
    peer_reports: list = field(default_factory=list)  # (time, Unhealthy | PeerUnavailable)
    traceback: tuple | None = None  # (time, PythonTraceback): the last one
    keras3: tuple | None = None  # (time, Keras3PerReplica)
    bind_failure: tuple | None = None  # (time, BindFailure)
    input_exhausted: tuple | None = None  # (time, InputExhausted): the first
    mismatch: tuple | None = None  # (time, CollectiveMismatch): the first
    nonfinite: tuple | None = None  # (time, NonFiniteLoss): the first loss line printed as NaN or inf
    native_crash: tuple | None = None  # (time, NativeCrash): faulthandler's dump of a fault in compiled code
    jax_joining: tuple | None = None  # (time, JaxJoining): jax.distributed.initialize() began
    gloo_failure: tuple | None = None  # (time, GlooFailed): the first collective a gone peer broke
    coordination_timeout: tuple | None = None  # (time, CoordinationTimeout): JAX's coordinator gave up on a process
    tf_config_set: dict | None = None  # {"tf_config": ..., "time": ...} when the script set its own
    progress_at: float = 0.0  # the last new output or report
    peak_rss: int = 0
    stopped: bool = False  # SIGSTOPped at the last look

    def record(self, events: list, now: float) -> None:
        for event in events:
            if isinstance(event, tf.ServerStarted):
                self.server_at = self.server_at or now
            elif isinstance(event, tf.AgentConnected):
                self.connected_at = self.connected_at or now
            elif isinstance(event, tf.WaitingForPeers):
                self.waiting_at = (self.waiting_at or now) if event.waiting else None
                self.waiting = event
            elif isinstance(event, (tf.Unhealthy, tf.PeerUnavailable)):
                self.peer_reports.append((now, event))
            elif isinstance(event, tf.PythonTraceback):
                self.traceback = (now, event)
            elif isinstance(event, tf.Keras3PerReplica):
                self.keras3 = (now, event)
            elif isinstance(event, tf.BindFailure):
                self.bind_failure = (now, event)
            elif isinstance(event, tf.InputExhausted):
                self.input_exhausted = self.input_exhausted or (now, event)
            elif isinstance(event, tf.CollectiveMismatch):
                self.mismatch = self.mismatch or (now, event)
            elif isinstance(event, tf.NonFiniteLoss):
                self.nonfinite = self.nonfinite or (now, event)
            elif isinstance(event, NativeCrash):
                self.native_crash = (now, event)
            else:
                self._record_jax(event, now)

    def _record_jax(self, event, now: float) -> None:
        if isinstance(event, jax.JaxJoining):
            self.server_at, self.jax_joining = self.server_at or now, self.jax_joining or (now, event)
        elif isinstance(event, jax.GlooConnected):
            self.connected_at = self.connected_at or now
        elif isinstance(event, jax.GlooFailed):
            self.gloo_failure = self.gloo_failure or (now, event)
        elif isinstance(event, jax.CoordinationTimeout):
            self.coordination_timeout = self.coordination_timeout or (now, event)



def task_label(task_id: TaskId, is_chief: bool) -> str:
    """How views name a task: 'worker 0 (chief)' where worker 0 is the chief, 'chief 0', 'evaluator 0'."""
    return f"{task_id}" + (" (chief)" if is_chief and task_id.type != "chief" else "")


class Named:
    """How a task is named, the same for a live Task and its TaskView (engine/tasks/view.py): both have
    `id` (a TaskId) and `is_chief`."""

    id: TaskId
    is_chief: bool

    @property
    def name(self) -> str:
        """'worker:0', 'ps:1': how a user names this task (Run.task accepts it)."""
        return f"{self.id.type}:{self.id.index}"

    @property
    def label(self) -> str:
        return task_label(self.id, self.is_chief)


class Task(Named):
    """A task's process across restarts, with its log and what was read from it (public as Run.workers[i])."""

    def __init__(self, position: int, task_id: TaskId, log_path: Path, reports_path: Path, keep_lines: int,
                 step_scale: float = 1.0, user_files: tuple = (), outputs: tuple = ()):
        self.position = position  # place in Run.workers; the chief is 0
        self.id = task_id
        self.index = task_id.index  # within its type: `ps 0` may be at position 2
        self.task_type = task_id.type
        self.log_path = log_path
        self.tf_config: dict = {}
        self.pid: int | None = None
        self.returncode: int | None = None
        self.status = Status.STARTING
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.port_open_at: float | None = None
        self.restarts = 0  # times this task started again: with its cluster (failure policy) or alone (the user)
        # Each output is called as output(task_id, lines) with every read's lines (readers/output.py).
        self._folder = RunFolder(log_path.parent)
        self.output = TaskOutput(log_path, keep_lines, sinks=(self._took, *(partial(o, task_id) for o in outputs)),
                                 kept=self._folder.screen(task_id.type, task_id.index))
        self.metrics = MetricsParser(step_scale=step_scale)
        self.is_chief = False
        self.serves = False  # it only serves (a parameter-server job's worker or ps): engine/tasks/roles.py
        self.signals = Signals()
        self.vitals = Vitals()  # phase, step rate, CPU, memory: what the overview shows
        self.killed_by_kwnb = False  # %kw_kill / Run.kill: a failure, but not a mysterious one
        self.joined_before = False  # an earlier attempt joined a cluster (a restart starts its signals afresh)
        self._rows_at_start = _rows_mark(None)  # the metric rows read before this attempt (its phase: _update_vitals)
        self.warm = False
        self._scanner = tf.TfLogScanner(user_files)
        self._sampled_at = float("-inf")
        self._unreadable_since: float | None = None  # the first of the read errors in a row (READ_ERROR_SECONDS)
        self._reports = FileFollower(reports_path)
        self._process: TaskProcess | None = None
        self._stop_requested = False

    @property
    def task(self) -> TaskId:
        """The same as `id` (the name notebooks used before tasks were called tasks)."""
        return self.id

    @property
    def address(self) -> str:
        """host:port, or "" while a scheduler has not yet placed the task."""
        return address_of(self.tf_config["cluster"], self.id) if self.tf_config else ""

    @property
    def where(self) -> str:
        """Where the task runs, in words: a pid here, a job and node under a scheduler."""
        return self._process.where() if self._process is not None else ""

    @property
    def alive(self) -> bool:
        return self._process is not None and self.returncode is None

    @property
    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.time()) - self.started_at

    # ----- driven by the run (under its locks) ---------------------------------------------------
    def _started(self, process: TaskProcess, tf_config: dict) -> None:
        self._process, self.tf_config, self.pid = process, tf_config, process.pid
        self.warm = process.warm  # in an interpreter that had already imported TensorFlow
        self.returncode, self.ended_at, self.port_open_at = None, None, None
        self.status, self.started_at, self._stop_requested = Status.STARTING, time.time(), False
        self.joined_before = self.joined_before or self.signals.connected_at is not None
        self._rows_at_start = _rows_mark(self.metrics)
        self.signals, self.killed_by_kwnb = Signals(progress_at=self.started_at), False
        self.vitals.restarted(self.started_at)

    @property
    def screen(self) -> TerminalScreen:
        """The log's last lines as a terminal shows them (the reader's)."""
        return self.output.screen

    @property
    def runtime_lines(self) -> int:
        """TensorFlow's C++ runtime lines so far, which views fold away."""
        return self.output.runtime_lines

    @property
    def phase(self) -> str:
        """starting, joining, training, ... (engine/tasks/vitals.py); `vitals.phases` has their history."""
        return self.vitals.phase

    @property
    def stacks_path(self) -> Path:
        """The file this task's bootstrap appends its stacks to when asked (engine/diagnoses/stacks.py); it exists
        once the bootstrap is ready for the signal."""
        return self._folder.stacks(self.position)

    def signal_scope(self) -> object:
        """What one signal to this task reaches: itself, or (a Slurm job) every task of its job."""
        return self._process.signal_scope() if self._process is not None else self

    def fetch_files(self) -> None:
        """What the task wrote into the run folder, here now (a node that does not share the folder)."""
        if self._process is not None:
            self._process.fetch_files()

    def signal_own_process(self, signum: int) -> bool:
        """Signal the task's own process, not its children, if it runs; whether it was sent."""
        if not self.alive:
            return False
        self._process.signal_task(signum)
        return True

    @property
    def bind_failed(self) -> bool:
        return self.signals.bind_failure is not None

    @property
    def stop_requested(self) -> bool:
        """kwnb ended this task (a stop, a timeout, the failure policy, a re-run): not a mystery."""
        return self._stop_requested

    def observe(self) -> Observation:
        """The slow half: read what is new. Touches only this task's followers and process handle.

        A read error is transient until it has lasted READ_ERROR_SECONDS: what was read before it is kept,
        and the rest is read again at the next poll."""
        seen = Observation()
        try:
            self._observe_into(seen)
        except OSError:
            now = time.monotonic()
            self._unreadable_since = self._unreadable_since or now
            if now - self._unreadable_since >= READ_ERROR_SECONDS:
                raise
            return seen
        self._unreadable_since = None
        return seen

    def _observe_into(self, seen: Observation) -> None:
        seen.text += self.output.read()
        seen.reported += self._reports.read_new()
        if self._process is None or self.returncode is not None:
            return
        seen.returncode = self._process.poll()
        if seen.returncode is not None:
            while more := self.output.read():  # to the end: a read takes at most MAX_READ bytes
                seen.text += more
            seen.reported += self._reports.read_new()
            # What it recorded between two samples: a script that sets TF_CONFIG and fails at once ends in well
            # under SAMPLE_SECONDS (its exit no longer spends a second in Python's last collection: bootstrap.py)
            seen.tf_config_set = self._tf_config_record()
            return
        seen.pid = self._process.pid
        seen.tf_config = self.tf_config or self._process.tf_config() or {}
        seen.queued = self._process.queued()
        seen.port_open = self.port_open_at is not None or _accepts(seen.tf_config, self.id,
                                                                   getattr(self._process, "probe", None))
        if time.monotonic() - self._sampled_at >= SAMPLE_SECONDS:
            self._sampled_at = time.monotonic()
            seen.sample = self._process.sample()
            seen.tf_config_set = self._tf_config_record()

    def _tf_config_record(self) -> dict | None:
        """The TF_CONFIG the script set, once the bootstrap has recorded it (task/bootstrap.py)."""
        return self.signals.tf_config_set or self._folder.read_tf_config_set(self.position)

    def apply(self, seen: Observation) -> bool:
        """The quick half, under the run's state lock: update what views read. Returns whether anything changed."""
        changed, now = bool(seen.text or seen.reported), time.time()
        if seen.text:
            self.output.feed(seen.text)  # to _took below, then to the run's outputs
        if seen.reported:
            self.metrics.feed_report_lines(seen.reported)
        if changed:
            self.signals.progress_at = now
        self._apply_sample(seen)
        if self._process is None or self.returncode is not None:
            return changed
        if seen.returncode is not None:
            self.output.end()  # its last line, if no newline ended it, to _took and the run's outputs
            self.signals.record(self._scanner.end(), now)  # a traceback still waiting for a tf.function's error
            self.returncode, self.ended_at = seen.returncode, time.time()
            self.status = task_status(self.status, seen.returncode, self._stop_requested, False, False)
            self._update_vitals(now)
            return True
        if seen.tf_config and not self.tf_config:
            self.tf_config, changed = seen.tf_config, True
        if seen.pid and self.pid is None:
            self.pid, changed = seen.pid, True
        if seen.port_open and self.port_open_at is None:
            self.port_open_at = time.time()
        serving = bool(self.port_open_at or self.screen.total_lines)
        status = task_status(self.status, None, self._stop_requested, serving, seen.queued)
        changed, self.status = changed or status != self.status, status
        return self._update_vitals(now) or changed

    def _update_vitals(self, now: float) -> bool:
        """Note the phase and step the task is at (engine/tasks/vitals.py); whether the phase changed."""
        trained = _rows_mark(self.metrics) != self._rows_at_start
        phase = phase_of(self.status, self.signals, self.metrics, trained, self.serves, self.port_open_at is not None)
        return self.vitals.update(phase, last_step(self.metrics.steps), now, self.signals.server_at)

    def _took(self, lines: Lines) -> None:
        """The reader's first sink (under the run's state lock): the metrics and signals read its whole pieces."""
        self.metrics.take(lines.text)
        self.signals.record(self._scanner.take(lines.text) + jax.jax_events(lines.text), time.time())

    def _apply_sample(self, seen: Observation) -> None:
        if seen.sample is not None:
            self.signals.peak_rss = max(self.signals.peak_rss, seen.sample.rss)
            self.signals.stopped = seen.sample.stopped
            self.vitals.sampled(seen.sample, time.time())
        if seen.tf_config_set and self.signals.tf_config_set is None:
            self.signals.tf_config_set = seen.tf_config_set

    def _stop(self, grace: float) -> None:
        if self._process is not None and self.returncode is None:
            self._stop_requested = True
        if self._process is None:
            return
        try:
            self._process.stop(grace)
        except OSError:  # its state cannot be read (a poll that raises): killed unread, so that nothing is left
            self._process.signal(signal.SIGKILL)

    def _kill(self) -> None:
        """SIGKILL, as a preempted machine would die: counts as a failure, not a stop."""
        if self._process is not None:
            self.killed_by_kwnb = True
            self._process.signal(9)

    def __repr__(self) -> str:
        code = "" if self.returncode is None else f" exit {self.returncode}"
        return f"<Task {self.task_type} {self.index} pid={self.pid} {self.status}{code}>"


Worker = Task  # the old name (engine/records/compat.py lists them all)


def _rows_mark(metrics) -> tuple:
    """Where a task's metric rows stand (epochs kept, step rows, the last one): a new row changes it."""
    if metrics is None:
        return 0, 0, None
    return len(metrics.epochs), len(metrics.steps), metrics.steps[-1] if metrics.steps else None


def _accepts(tf_config: dict, task_id: TaskId, probe=None) -> bool:
    """Whether the task's TensorFlow server accepts connections (its port is open)."""
    address = address_of(tf_config["cluster"], task_id) if tf_config else ""
    if not address:  # not placed yet, or an evaluator, which serves nothing
        return False
    if probe is not None:  # the task is in a private network (backends/netns.py): only a helper inside can connect
        return probe(address)
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PORT_PROBE_SECONDS):
            return True
    except OSError:
        return False
