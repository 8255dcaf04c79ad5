"""What the overview shows of a task, kept current by the supervisor: its phase (and how long it spent
in each), its recent step rate, its CPU and its memory.

Phases, from the task's own signals (engine/tasks/task.py):
    pending   queued by a scheduler
    starting  the interpreter and the imports, the script's set-up: no TensorFlow server yet
    joining   its server is up and it waits for its peers to join the cluster
    serving   a parameter-server job's worker or ps whose server is up: it only serves the coordinator, which
              trains (docs/roles.md); it never logs a join, so it is never `joining`, from its start to its end
    training  it has joined the cluster, or steps and epochs advance
    finishing its last epoch is done (Keras said how many) and it is shutting down: TensorFlow
              can take 5-8 s here to end once a peer has gone
    finished, failed, stopped   it has ended (its status)
"""
from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING

from .status import Phase, Status

if TYPE_CHECKING:
    from ...backends.base import Sample
    from ..readers.metrics import MetricsParser

PHASES = tuple(Phase)  # pending, starting, joining, serving, training, finishing, finished, failed, stopped
RATE_SECONDS = 5.0  # the step rate is over this window: long enough to smooth Keras's 0.05 s redraws


def phase_of(status: Status, signals, metrics: "MetricsParser", trained: bool, serves: bool = False,
             port_open: bool = False) -> Phase:
    """A task's phase from its status, what TensorFlow said (its Signals: engine/tasks/task.py, which imports
    this module) and its metric rows. `trained`: steps or epochs were read in this attempt (a restarted task
    keeps its earlier rows: they no longer say it trains). `serves`: the task only serves
    (engine/tasks/roles.py), from the moment its server is up (TensorFlow said so, or its `port_open` accepts
    connections)."""
    if status.ended:
        return Phase(status)
    if status == Status.PENDING:
        return Phase.PENDING
    if serves:
        return Phase.SERVING if signals.server_at is not None or port_open else Phase.STARTING
    if signals.waiting is not None and signals.waiting.waiting:
        return Phase.JOINING  # the coordination leader, waiting for the others
    if metrics.total_epochs and len(metrics.epochs) >= metrics.total_epochs:
        return Phase.FINISHING
    if signals.connected_at is not None or trained:
        return Phase.TRAINING
    return Phase.JOINING if signals.server_at is not None else Phase.STARTING


class Vitals:
    def __init__(self):
        self.phases: list[tuple[float, Phase]] = []  # (time it began, phase), across restarts
        self.rss = 0  # bytes, at the last sample
        self.cpu_percent: float | None = None  # of one core, since the last sample
        self._steps: deque = deque()  # (time, global step)
        self._cpu: tuple[float, float] | None = None  # (time, CPU seconds) at the last sample

    @property
    def phase(self) -> Phase:
        return self.phases[-1][1] if self.phases else Phase.STARTING

    def update(self, current: Phase, step: int | None, now: float, server_at: float | None = None) -> bool:
        """Note the task's phase and its latest global step; returns whether the phase changed. `server_at`: when
        this attempt's server came up. A task whose server started and joined within one read of its log (a loaded
        machine reads it seldom) went from starting to training at once; it joined all the same, from then."""
        self._note_step(step, now)
        if current == self.phase and self.phases:
            return False
        if server_at is not None and self.phases and self.phase == Phase.STARTING and \
                current in (Phase.TRAINING, Phase.FINISHING):
            self.phases.append((min(server_at, now), Phase.JOINING))
        self.phases.append((now, current))
        return True

    def restarted(self, now: float) -> None:
        self.phases.append((now, Phase.STARTING))
        self._steps.clear()
        self._cpu = None

    def sampled(self, sample: "Sample", now: float) -> None:
        self.rss = sample.rss
        if self._cpu is not None and now > self._cpu[0]:
            self.cpu_percent = max(0.0, 100 * (sample.cpu - self._cpu[1]) / (now - self._cpu[0]))
        self._cpu = (now, sample.cpu)

    def _note_step(self, step: int | None, now: float) -> None:
        if step is not None and (not self._steps or self._steps[-1][1] != step):
            self._steps.append((now, step))
        while self._steps and now - self._steps[0][0] > RATE_SECONDS:
            self._steps.popleft()

    @property
    def rate(self) -> float | None:
        """Steps per second over the last few seconds, where the output shows steps."""
        if len(self._steps) < 2:
            return None
        (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
        if time.time() - t1 > RATE_SECONDS:
            return 0.0  # no step for a while
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None

    def mean_rate(self, ended_at: float | None, step: int | None) -> float | None:
        """Steps per second over the whole time spent training (for the summary, once a task ended at
        `ended_at`, its last global step `step`)."""
        training = self.time_in(until=ended_at).get(Phase.TRAINING, 0.0)
        return step / training if step and training > 0 else None

    def time_in(self, until: float | None = None) -> dict[str, float]:
        """Seconds spent in each phase (all attempts together), up to `until` (now by default)."""
        spent: dict[str, float] = {}
        ends = [start for start, _ in self.phases[1:]] + [until or time.time()]
        for (start, phase), end in zip(self.phases, ends):
            if phase in (Phase.FINISHED, Phase.FAILED, Phase.STOPPED):
                continue
            spent[phase] = spent.get(phase, 0.0) + max(0.0, end - start)
        return spent


def last_step(steps: list[dict]) -> int | None:
    """The latest global step of a task's step rows (engine/readers/metrics.py), or None."""
    return steps[-1]["step"] if steps else None


def queued_seconds(vitals: list[Vitals], now: float | None = None) -> float:
    """How long the run's tasks waited in a scheduler's queue (phase "pending"), every attempt together.

    A Slurm job's tasks leave the queue together, so the longest any task waited is the run's; local
    tasks never wait there (0). `--timeout` does not count this time.
    """
    return max((each.time_in(until=now).get("pending", 0.0) for each in vitals), default=0.0)
