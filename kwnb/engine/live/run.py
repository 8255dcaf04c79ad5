"""The run a learner holds: `kwnb.launch` and `%%kw_worker` return it, and `kwnb.Run` is its class.

It shows what a learner may read or do and nothing else: the run's tasks, status, logs and rows, waiting for
it, stopping it, killing or restarting a task, its stacks, summary and snapshot, and what a
ParameterServerStrategy coordinator in the notebook needs (coordinator.py). What kwnb does with the run is on
its engine side (run_engine.py: the tasks, the launcher, the locks, the notes and diagnoses) and its
supervisor (supervisor.py), both held privately; kwnb's own code (the registry) reaches the engine side
with `engine_of(run)`. The on_end callbacks get this Run; one with more to do after the end returns an
AfterEnd (after_end.py), which the engine side runs.

Names earlier versions showed here (the engine's steps and locks, copies of the settings) keep working with
a DeprecationWarning (compat.py), but are not in `dir(run)`; tests/test_run.py lists the names that are.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from ..records.compat import task_keyword
from ..records.reading import RunReading
from ..records.snapshot import RunSnapshot
from ..records.summary import format_summary
from ..tasks import roles
from . import control, coordinator
from .compat import former
from .run_engine import RunEngine
from .settings import DEFAULTS, LaunchSettings
from .supervisor import Supervisor


class Shown:
    """A value a learner reads: the engine side's attribute of the same name, read-only (setting it raises,
    where a plain attribute set on the Run would hide the value and change nothing)."""

    def __init__(self, doc: str):
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, run: "Run | None", owner: type | None = None):
        return self if run is None else getattr(run._engine, self.name)

    def __set__(self, run: "Run", value) -> None:
        raise AttributeError(f"Run.{self.name} is read-only")


class Run(RunReading):
    """A script running on a cluster. Start with `kwnb.launch()`; the notebook shows it as a dashboard."""

    name = Shown("the run's name: the script's file name unless one was given")
    dir = Shown("the run's folder: its logs, run.json, the summary and pictures")
    script = Shown("the script, as a resolved path (a copy of it is kept in `dir`)")
    args = Shown("the script's arguments, as a list")
    cwd = Shown("where the tasks run")
    python = Shown("the Python the tasks run")
    settings = Shown("every launch option, as a LaunchSettings (engine/live/settings.py)")
    launcher = Shown("what starts the tasks: a backend's launcher (backends/)")
    workers = Shown("every task, chief first, ps and evaluator tasks too (also `tasks`)")
    chief = Shown("the chief task (position 0)")
    status = Shown("pending, starting, running, finished, failed or stopped (equal to those strings)")
    done = Shown("the run has ended: every task exited, or it never started")
    elapsed = Shown("seconds from the start to the end, or to now")
    exit_codes = Shown("each task's exit code, chief first; None for one still running")
    started_at = Shown("when the tasks were started (time.time()), None before")
    ended_at = Shown("when the run ended, None before")
    reason = Shown("why the run ended early, in words")
    restarts = Shown("cluster restarts by the failure policy (--on-failure restart)")
    user_restarts = Shown("tasks restarted by the user (restart, %kw_restart)")
    port_retries = Shown("relaunches because a port was taken")
    timed_out = Shown("the run was stopped by its timeout")

    def __init__(self, script: str | os.PathLike, n: int = DEFAULTS.n, name: str | None = None, **options):
        """`options`: LaunchSettings' fields (engine/live/settings.py), e.g. ps=1, timeout=600."""
        self._engine = RunEngine(script, LaunchSettings.of("Run.__init__", n=n, name=name, **options))
        self._supervisor = Supervisor(self._engine, self)

    def _reading_lock(self):  # RunReading.logs reads a live task's reader under the state lock
        return self._engine.state_lock

    # ----- life cycle -------------------------------------------------------------------------
    def start(self) -> "Run":
        """Start every task, or none (raising why), and the supervisor that watches them until the end."""
        self._engine.start()
        self._supervisor.start()
        return self

    def wait(self, timeout: float | None = None, pictures: bool = False) -> list[int | None]:
        """Exit codes of all tasks, chief first; None for any still running when `timeout` passed. The run is done
        when its tasks have ended; `pictures=True` also waits (within the timeout) for what views go on drawing
        (kwnb.launch's curves.png and timeline.png, then `curves_path`)."""
        return self._engine.wait(timeout, pictures)

    def stop(self, reason: str = "stopped by the user") -> list[int | None]:
        """End every task (TERM, then KILL after a grace period) and wait for the run to close."""
        return self._engine.stop(reason)

    def kill(self, task: int | str) -> None:
        """SIGKILL one task, as a preempted machine: the failure policy then decides what follows."""
        control.kill(self._engine, self.task(task))

    def restart(self, task: int | str) -> None:
        """Start one task again with the same TF_CONFIG, as a replaced machine rejoining the cluster."""
        control.restart(self._engine, self.task(task))

    def stacks(self, task: int | str | None = None, native: bool = False) -> dict[int, str]:
        """Every thread's Python stack of each live task (or of one), by position; `native` adds py-spy's
        native frames where py-spy is installed and allowed."""
        return control.stacks(self._engine, self.workers if task is None else [self.task(task)], native)

    # ----- reading ----------------------------------------------------------------------------
    @task_keyword
    def history(self, task: int | str = 0) -> list[dict]:
        """Per-epoch rows of one task (the chief by default): {'epoch': 0, 'loss': ..., ...}.

        `task` is a position in the run or a name like 'worker:1'."""
        chosen = self.task(task)
        with self._engine.state_lock:
            return [dict(row) for row in chosen.metrics.history()]

    @task_keyword
    def step_history(self, task: int | str = 0) -> list[dict]:
        """Per-step rows where the output gives them (Keras verbose=1, or kwnb.report(step=...))."""
        chosen = self.task(task)
        with self._engine.state_lock:
            return [dict(row) for row in chosen.metrics.steps]

    @property
    def notes(self) -> list[str]:
        """What the user should be told about the run (the summary lists them)."""
        return _copied(self._engine, "notes")

    @property
    def diagnoses(self) -> list:
        """What kwnb found wrong, one sentence each (docs/diagnoses.md)."""
        return _copied(self._engine, "diagnoses")

    @property
    def diagnosis_history(self) -> list:
        """Every diagnosis ever made, withdrawn ones too."""
        return _copied(self._engine, "diagnosis_history")

    @property
    def warm(self) -> bool:
        """Every task of the latest launch started in a warm interpreter (TensorFlow already imported)."""
        return all(task.warm for task in self.workers)

    @property
    def curves_path(self) -> Path | None:
        """curves.png in the run folder, once a view has drawn it (at the end of the run)."""
        path = self._engine.folder.curves
        return path if path.is_file() else None

    def snapshot(self) -> RunSnapshot:
        """An immutable copy of what views show (engine/records/snapshot.py): render it holding no lock."""
        return self._engine.snapshot()

    def summary(self) -> str:
        return format_summary(self.snapshot())

    # ----- a ParameterServerStrategy coordinator in this process ------------------------------
    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until every task's port accepts connections (its TensorFlow server is up).

        For a coordinator in the notebook (ParameterServerStrategy), which must not connect first.
        False if `timeout` passed or the run ended before that.
        """
        return coordinator.wait_ready(self._engine, timeout)

    def coordinator_tf_config(self) -> dict:
        """TF_CONFIG for a ParameterServerStrategy coordinator in this process (a run with ps tasks and
        no chief task): the run's cluster with its reserved `chief` entry, task chief 0."""
        return coordinator.coordinator_tf_config(self._engine)

    def cluster_resolver(self):
        """The coordinator's `tf.distribute.cluster_resolver.SimpleClusterResolver` (imports TensorFlow here)."""
        return roles.cluster_resolver(self.coordinator_tf_config())

    # ----- what is not a learner's ------------------------------------------------------------
    def __getattr__(self, name: str):
        """A name earlier versions showed (compat.py): still read from the engine side, with a DeprecationWarning."""
        was = former(name)
        if was is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(was.message(name), DeprecationWarning, stacklevel=2)
        return was.read(self._engine)

    def __setattr__(self, name: str, value) -> None:
        if former(name) is not None:  # set on the Run, it would change nothing kwnb reads
            raise AttributeError(f"Run.{name} cannot be set: launch options are given to kwnb.launch or "
                                 f"%%kw_worker, and the rest is kwnb's own")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        return f"<kwnb Run {self.name!r} {self.status}, {len(self.workers)} tasks, {self.dir}>"


def _copied(engine: RunEngine, name: str) -> list:
    """A list the supervisor changes, copied under the state lock: a learner's change cannot reach the run."""
    with engine.state_lock:
        return list(getattr(engine, name))


def engine_of(run: Run) -> RunEngine:
    """The engine side of a run, for kwnb's own code (the registry, the end-of-run outputs): never a learner's."""
    return run._engine
