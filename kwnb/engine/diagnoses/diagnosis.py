"""One diagnosis (a finding in one sentence), what a diagnosis pass reads of a run (RunView, ProcessFacts,
and both as one Look: what every kind's function takes), and the words for how a task ended and how far it
got, shared by the modules that make diagnoses (engine/diagnoses/diagnose.py holds the table of kinds)."""
from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from ...task.runfolder import kept
from ..tasks.view import TaskView

if TYPE_CHECKING:
    from .oom import OomEvidence


@dataclass
class Diagnosis:
    """One finding: what happened, to which task (its position; None for the whole run), what to do.
    Every field is kept in run.json (`kept`: kwnb/task/runfolder.py), so a past run shows it as it was."""

    kind: str = kept()
    task: int | None = kept(missing=None)
    message: str = kept()
    since: float = kept(0.0)
    evidence: list[str] = kept([], read=list)
    # A task's end (engine/diagnoses/recovery.py): what happened in words without advice, and the task's restarts
    # when it happened. A later attempt of the task may recover from it; then it is history, no longer a fault.
    cause: str = kept("")
    attempt: int = kept(0)
    recovered: bool = kept(False)
    # One story per run (engine/diagnoses/diagnose.py: the pass links and orders them): the `key` of the root
    # cause this finding is a consequence of, "" for a root cause or a finding on its own.
    follows: str = kept("")
    # A root cause's account of the tasks' ends it explains, by position: how each ended, in words that follow
    # "which" ("failed with ValueError"). Read within the pass that found it (Look.explained), emptied when the run
    # takes the finding (diagnose.merge); not kept.
    ended: dict = field(default_factory=dict, compare=False, repr=False)

    def __str__(self) -> str:
        return self.message

    @property
    def key(self) -> str:
        """What names this finding in its run ("error@1", "stalled"): a run has one of each kind per task."""
        return self.kind if self.task is None else f"{self.kind}@{self.task}"

    def take_words(self, found: "Diagnosis") -> None:
        """A standing diagnosis found again: it keeps its `since` and takes the new finding's words."""
        self.message, self.evidence, self.cause = found.message, found.evidence, found.cause
        self.attempt, self.recovered, self.follows = found.attempt, found.recovered, found.follows

    def copy(self) -> "Diagnosis":
        """The supervisor updates a standing diagnosis's message in place: a reader gets its own copy."""
        return dataclasses.replace(self, evidence=list(self.evidence))


@dataclass(frozen=True)
class RunView:
    """What a diagnosis pass reads of a run, copied at one moment under the run's state lock."""

    tasks: tuple[TaskView, ...]  # by position: the chief first
    name: str  # the run's, for the commands a message suggests (%kw_stack NAME)
    script: str  # the script's file name: a traceback that reaches its top level is uncaught
    user_files: tuple[str, ...] = ()  # the script and the job's files: whose frames a diagnosis names
    stall_after: float = 0.0  # seconds without progress before `stalled`, the run's --stall-after (declared in
    # engine/live/settings.py, handed in by the supervisor); 0, as in a view made without it, turns it off
    diagnoses: tuple[Diagnosis, ...] = ()  # the current ones (copies), so that a finding keeps its first task
    env: Mapping[str, str] = field(default_factory=dict)  # the run's --env, over kwnb's own task variables
    framework: str = "tensorflow"  # the run's --framework: a JAX run's kinds are jax_faults.py's
    restart_limit: int = 0  # the cluster restarts the failure policy may make (--on-failure restart), else 0
    hand_sharding: tuple = ()  # where the job's files shard a dataset after batching it (engine/readers/program.py)
    saves: tuple = ()  # the script's saves to one literal path (saves.py's SaveCall), read once at launch
    stacks_at: float = 0.0  # when the supervisor last captured the tasks' stacks for a stall (0: not yet)


@dataclass(frozen=True)
class ProcessFacts:
    """What the supervisor gathered from the tasks' processes for one pass, by task position."""

    stacks: Mapping[int, str] = field(default_factory=dict)  # every live task's stacks, when a stall is suspected
    oom: Mapping[int, "OomEvidence"] = field(default_factory=dict)  # tasks SIGKILLed by the OOM killer
    written: Mapping[str, float] = field(default_factory=dict)  # a literal save path -> its file's mtime, once
    # every task has ended (saves.py): the save was made during the run


@dataclass
class Look:
    """One diagnosis pass as every kind's function reads it (engine/diagnoses/diagnose.py's KINDS): the run,
    the time, the process facts, and what the kinds listed before found in this pass."""

    view: RunView
    now: float
    facts: ProcessFacts = field(default_factory=ProcessFacts)
    found: list[Diagnosis] = field(default_factory=list)

    @property
    def tasks(self) -> list[TaskView]:
        return list(self.view.tasks)

    @property
    def current(self) -> list[Diagnosis]:
        """The run's diagnoses before this pass (copies): a kind said once keeps its first task and words."""
        return list(self.view.diagnoses)

    def explained(self, position: int | None) -> tuple[Diagnosis, str] | None:
        """The root cause found so far in this pass that explains how the task at `position` ended, with its
        words for that end ("failed in that collective"); the pass asks the root causes' kinds first."""
        for diagnosis in self.found:
            if position in diagnosis.ended:
                return diagnosis, diagnosis.ended[position]
        return None

    @property
    def members(self) -> list[TaskView]:
        """The tasks that train together: a sidecar evaluator never joins."""
        return [task for task in self.view.tasks if task.task_type != "evaluator"]


# The signals a process raises on itself when its compiled code faults (a kill from outside is another signal).
FAULTS = {signal.SIGSEGV: "a segmentation fault", signal.SIGBUS: "a bus error",
          signal.SIGILL: "an illegal instruction", signal.SIGFPE: "an arithmetic fault", signal.SIGABRT: "an abort"}


def signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"


def ended(task: TaskView) -> str:
    """How a task ended, in words: 'was killed by SIGKILL', 'crashed with SIGSEGV' (a fault's signal is the
    process's own, engine/diagnoses/crashes.py), 'exited normally', 'crashed (exit code 1)'."""
    code = task.returncode
    if code is not None and code < 0:
        return f"crashed with {signal_name(-code)}" if -code in FAULTS else f"was killed by {signal_name(-code)}"
    return "exited normally" if code == 0 else f"crashed (exit code {code})"


def reached(task: TaskView) -> str:
    """How far training got: the last epoch and step kwnb read from the task's output ('epoch 2/5, step
    30/100'), or '' (not where the task runs: that is TaskView.where)."""
    label = task.progress[1]
    if not label and task.step:  # a custom loop that prints "step 26/60" without epochs
        label = f"step {task.step}" + (f"/{task.steps_per_epoch}" if task.steps_per_epoch else "")
    return label
