"""What TensorFlow said in a task's log, as events: the vocabulary tf_messages.py's scanner reads a log
into and the diagnoses (diagnose.py, training_faults.py) read. Standard library only."""
from __future__ import annotations

import os
from dataclasses import dataclass

Task = tuple  # ("worker", 1): a task's job name and index


@dataclass(frozen=True, kw_only=True)
class Event:
    """Something TensorFlow said; `lines` are the log lines it was read from (the evidence)."""
    lines: tuple[str, ...]
    kind = "event"


@dataclass(frozen=True, kw_only=True)
class ServerStarted(Event):
    """The task's gRPC server is up (it is joining the cluster); `address` as TF bound it."""
    address: str
    kind = "server_started"


@dataclass(frozen=True, kw_only=True)
class AgentConnected(Event):
    """This task's coordination agent reached the coordination service (on task 0)."""
    kind = "agent_connected"


@dataclass(frozen=True, kw_only=True)
class TaskConnected(Event):
    """Logged by the chief only: `task` registered with its coordination service."""
    task: Task
    kind = "task_connected"


@dataclass(frozen=True, kw_only=True)
class WaitingForPeers(Event):
    """Chief only: `waiting` of `total` tasks have not connected yet (0 once all have).

    Logged once per change, not repeated while waiting. The same wait is reported again as each straggler
    line arrives, with the list so far: the latest event is the current state.
    """
    waiting: int
    total: int
    stragglers: tuple[Task, ...] = ()
    kind = "waiting_for_peers"


@dataclass(frozen=True, kw_only=True)
class Unhealthy(Event):
    """The coordination service declared `tasks` dead (no heartbeat for 10 s), also after a normal exit."""
    tasks: tuple[Task, ...]
    kind = "unhealthy"


@dataclass(frozen=True, kw_only=True)
class PeerUnavailable(Event):
    """A collective failed because a peer is gone; `task` and `address` when the text names them."""
    reason: str
    task: Task | None = None
    address: str | None = None
    kind = "peer_unavailable"


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{os.path.basename(self.file)} line {self.line}, in {self.function}"


@dataclass(frozen=True)
class Raised:
    """The error a tf.function raised, which TensorFlow prints lines below its own first line (wrapped.py reads
    it): in the function's Python code as it was traced (`ValueError: in user code:`), or by an op of its graph
    as it ran (`InvalidArgumentError: Graph execution error:`)."""
    exc_type: str  # the raised error's type ("ValueError"); an op's error keeps the traceback's
    message: str  # its first line saying what went wrong (Keras's "Exception encountered when calling layer" skipped)
    frames: tuple[Frame, ...]  # inside the function: autograph's frames, or where the failing op was defined
    user_frame: Frame | None = None  # the innermost of them in the user's files

    @property
    def short_type(self) -> str:
        return self.exc_type.rpartition(".")[2]


@dataclass(frozen=True, kw_only=True)
class PythonTraceback(Event):
    """An uncaught Python exception; `user_frame` is the innermost frame in the scanner's user files."""
    exc_type: str  # as printed: "tensorflow.python.framework.errors_impl.UnavailableError"
    message: str  # its first line
    frames: tuple[Frame, ...]
    user_frame: Frame | None = None
    raised: Raised | None = None  # the error a tf.function raised, when the first line only wraps it
    kind = "traceback"

    @property
    def short_type(self) -> str:
        return self.exc_type.rpartition(".")[2]

    @property
    def where(self) -> Frame | None:
        """The user's innermost frame, else the innermost frame."""
        return self.user_frame or (self.frames[-1] if self.frames else None)

    @property
    def error(self) -> tuple[str, str, Frame | None]:
        """What went wrong and where, as a learner reads it: the type, the message and the user's frame of the
        error a tf.function raised, else the traceback's own."""
        raised = self.raised
        if raised is None:
            return self.short_type, self.message, self.where
        return raised.short_type, raised.message, raised.user_frame or self.where


@dataclass(frozen=True, kw_only=True)
class Keras3PerReplica(Event):
    """Keras 3 under MultiWorkerMirroredStrategy (keras-team/keras#20585): use tf.keras with tf-keras."""
    kind = "keras3"


@dataclass(frozen=True, kw_only=True)
class BindFailure(Event):
    """`Could not start gRPC server`: the task's port was taken; `address` as TF tried it ('0.0.0.0:P')."""
    address: str | None
    kind = "bind_failure"

    @property
    def port(self) -> int | None:
        tail = (self.address or "").rpartition(":")[2]
        return int(tail) if tail.isdigit() else None


@dataclass(frozen=True, kw_only=True)
class NativeCrash(Event):
    """`Fatal Python error: Segmentation fault` and each thread's Python stack, as faulthandler (on in every task:
    kwnb/task/bootstrap.py) prints them when compiled code faults. `frames`: the thread that ran the user's code
    (else the longest), outermost first as in a traceback; `user_frame`: its innermost frame in the user's files."""
    error: str
    frames: tuple[Frame, ...] = ()
    user_frame: Frame | None = None
    kind = "native_crash"

    @property
    def innermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None


@dataclass(frozen=True, kw_only=True)
class InputExhausted(Event):
    """The input ran out: Keras' "Your input ran out of data" warning (fit returns, exit 0), or tf.data's
    OutOfRangeError "End of sequence" in a custom loop; `step`/`steps` from the progress bar it interrupted."""
    source: str  # "keras" or "tf.data"
    step: int | None = None
    steps: int | None = None
    kind = "input_exhausted"


@dataclass(frozen=True, kw_only=True)
class NonFiniteLoss(Event):
    """A line that prints a loss as NaN or infinite, in whatever form a custom loop prints it; `name` as printed."""
    name: str
    value: str  # "NaN" or "infinite"
    kind = "nonfinite_loss"


@dataclass(frozen=True, kw_only=True)
class CollectiveMismatch(Event):
    """Tasks met in one collective instance with different shapes or op types: they ran different collectives
    (a chief-only `strategy.reduce`, save or evaluate), so their code paths differed."""
    instance: int | None
    kind = "collective_mismatch"
