"""Diagnoses: what a run's tasks are doing wrong, in one sentence each, from their logs and processes.

KINDS, at the end, is the one table of kinds: each row names a kind, the function that finds it, whether it
says where a failure started (`origin`: the run's reason names it) and whether it describes a moment and is
withdrawn when that passes (`transient`); docs/diagnoses.md has a row for each (tests/test_docs.py reads this
table). A new kind is one function (taking a Look, diagnosis.py; and the task, for a kind asked of each task)
plus one row.

A pass is a pure function of values: `findings(view, now, facts)` reads a RunView (diagnosis.py: every
task's signals, engine/tasks/task.py, copied under the run's state lock) and the process facts the
supervisor gathered (ProcessFacts: the stacks of stalled tasks, the OOM killer's evidence), asks each kind
in the table's order, and returns what holds now; `merge(current, found, now)` is how the run applies it to
its diagnoses, keeping when each was first seen. A run whose tasks all exit 0 ends with none: a peer that
finished normally is never "lost".

One story per run: the kinds that can be a root cause (`origin`) are asked first, and each root finding says
which tasks' ends it explains and how (Diagnosis.ended: an error, a kill, the collective of uneven steps). A
finding of a kind that can be a consequence (`follows`: a lost peer, a peer that never joined) about such a
task is worded as that root's consequence by its kind (Look.explained), linked to it here (Diagnosis.follows)
and listed right after it (`in_story_order`), so the run names the root cause first and never says a task
"crashed" that another finding says failed because of something else.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Callable

from . import known_errors, recovery, saves
from .crashes import is_fault, native_crash
from ..tasks.view import TaskView
from . import training_faults as training
from .distribution import changed_at, not_distributed
from .divergence import diverging
from .jax_faults import jax_alone, jax_not_joined, jax_peer_lost
from .diagnosis import Diagnosis, Look, ProcessFacts, RunView, signal_name
from .oom import OomEvidence
from .peers import peer_lost, waiting_for_peers
from .stall import stall, uncaught
from .ray_faults import ray_memory_monitor, ray_node_lost
from ...machine.sizes import format_size
from ...machine.task_env import LEGACY_KERAS, legacy_keras

# Collective failures a task raises because a peer is gone: consequences, not causes.
CONSEQUENCES = training.CONSEQUENCES
MEMORY_HINT_SHARE = 0.5  # peak memory above this share of the machine's makes the OOM killer a suspect


def merge(current: list[Diagnosis], found: list[Diagnosis], now: float,
          final: bool = False) -> tuple[list[Diagnosis], list[Diagnosis]]:
    """What the run's diagnoses become with what holds now (run under its state lock): (kept, new). A standing
    one keeps its `since` and takes the new words in place.

    On the final pass (every task has ended) a moment that lasted until the end stays: a run
    stopped while stalled keeps saying where it was stuck."""
    found = {(d.kind, d.task): d for d in found}
    kept, new = [], []
    for old in current:
        now_found = found.pop((old.kind, old.task), None)
        if now_found is not None:
            old.take_words(now_found)
            kept.append(old)
        elif old.kind not in TRANSIENT or final:
            kept.append(old)
    for diagnosis in found.values():
        diagnosis.since, diagnosis.ended = now, {}  # (`ended` served its pass: the run keeps the link, `follows`)
        kept.append(diagnosis)
        new.append(diagnosis)
    return in_story_order(kept), new


def in_story_order(diagnoses: list[Diagnosis]) -> list[Diagnosis]:
    """Root causes (and findings on their own) in the order they came, each followed by its consequences. A
    consequence whose root is no longer listed (withdrawn) stands where it came."""
    listed = {d.key for d in diagnoses}
    ordered: list[Diagnosis] = []

    def tell(story: Diagnosis) -> None:  # a consequence may have its own (a lost peer of a lost peer)
        ordered.append(story)
        for then in diagnoses:
            if then.follows == story.key and then not in ordered:
                tell(then)

    for root in diagnoses:
        if root.follows not in listed and root not in ordered:
            tell(root)
    return ordered + [d for d in diagnoses if d not in ordered]  # (a circle of links, which no pass makes)


def findings(view: RunView, now: float, facts: ProcessFacts = ProcessFacts()) -> list[Diagnosis]:
    """What holds now: a function of its inputs only (it reads no file and signals no process). Each kind in
    the table's order, the origins first (ASKED); the kinds asked of each task are asked where the first of them
    is listed, task by task (a task's findings together, as the run lists them); in story order."""
    look = Look(view, now, facts)
    for kinds in ASKED:
        each_task = [kind for kind in kinds if kind.each_task]
        for kind in kinds:
            if kind.find is None or kind.each_task and kind is not each_task[0]:
                continue
            # One at a time: a kind sees what those asked before it found (Look.explained).
            if kind.each_task:
                for task in look.tasks:
                    for each in each_task:
                        _keep(look, each.find(task, look))
            else:
                _keep(look, kind.find(look))
    _link(look)
    # The ends a restart left behind first, so that a task that ended the same way again is said as that new end
    # (merge: the last finding of a kind and task wins).
    return recovery.after_restarts(look.current, look.tasks, ENDS, view.restart_limit) + \
        in_story_order(recovery.attempts_of(look.found, look.tasks, ENDS))


def _keep(look: Look, found: Diagnosis | list[Diagnosis] | None) -> None:
    look.found += [d for d in (found if isinstance(found, list) else [found]) if d]


def _link(look: Look) -> None:
    """Each finding of a kind that can be a consequence, about a task whose end a root cause of this pass
    explains, is linked to that root (its kind worded it so, from the same Look.explained)."""
    for diagnosis in look.found:
        root = look.explained(diagnosis.task) if diagnosis.kind in FOLLOWS else None
        if root is not None and root[0] is not diagnosis:
            diagnosis.follows = root[0].key


def origin(diagnoses: list[Diagnosis], tasks: list[TaskView]) -> Diagnosis | None:
    """The task where a failure started (the one that raised or was killed), for the run's reason."""
    # Not a sidecar evaluator's: its failure is not training's (engine/tasks/roles.py); nor one a restart of its
    # task left behind (engine/diagnoses/recovery.py): a later failure is not that one.
    causes = [d for d in diagnoses if d.kind in ORIGINS and d.task is not None and tasks[d.task].training
              and not recovery.restarted_since(d, tasks[d.task], ENDS)]
    return min(causes, key=lambda d: d.since) if causes else None


# ----- one function per kind (the peers' kinds are in peers.py) -------------------------------------
def killed(task: TaskView, look: Look) -> Diagnosis | None:
    """A kill from outside kwnb, or (the OOM killer's evidence the supervisor gathered) out_of_memory."""
    found, code = look.facts.oom.get(task.position), task.returncode
    if code is None or task.stop_requested or task.killed_by_kwnb or not (code < 0 or code == 128 + 9) or is_fault(code):
        return None  # (a fault's signal is the process's own: native_crash says it)
    if task.bind_failed:
        return None  # port_taken says it: a JAX coordinator whose port was taken dies of SIGSEGV
    if look.explained(task.position):
        return None  # a root cause asked before it said how the task ended (Ray lost its node, say)
    number = -code if code < 0 else 9
    name = signal_name(number)
    if found is not None and number == signal.SIGKILL:
        return out_of_memory(task, found)
    peak = task.peak_rss
    memory = f"peak memory {format_size(peak)}" if peak else ""
    hint = ""
    if number == signal.SIGKILL and _memory_was_high(peak):
        hint = ": the system may have run out of memory (the OOM killer sends SIGKILL); try fewer workers or " \
               "smaller batches"
    cause = f"{task.id} was killed by {name} from outside kwnb"
    return Diagnosis("killed", task.position, cause + (f"; {memory}" if memory else "") + hint,
                     evidence=[f"exit code {code}"] + [memory] * bool(memory), cause=cause,
                     ended={task.position: f"was killed by {name} from outside kwnb"})


def out_of_memory(task: TaskView, found: OomEvidence) -> Diagnosis:
    last, peak = task.rss, task.peak_rss  # (a sample taken as it died reads 0)
    held = "kwnb had no memory sample of it" if not peak else \
        f"its memory peaked at {format_size(peak)}" + (f", {format_size(last)} at kwnb's last look" if last else "")
    cause = f"{task.id} was killed by the kernel's OOM killer"
    return Diagnosis("out_of_memory", task.position,
                     f"{cause}: {held} (resident, shared libraries included), "
                     f"against a limit of "
                     f"{format_size(found.limit)} ({found.limit_source}). Use less memory per task (smaller batches, "
                     f"fewer workers, data read from files rather than held in memory); `killed` instead would mean "
                     f"a kill from outside", evidence=[f"exit code {task.returncode}", *found.lines], cause=cause,
                     ended={task.position: "was killed by the kernel's OOM killer"})


def error(task: TaskView, look: Look) -> Diagnosis | None:
    signals, script = task.signals, look.view.script
    if signals.traceback is None or task.stop_requested or signals.keras3 or signals.bind_failure or signals.mismatch:
        return None  # (keras3, port_taken, tf_config_overridden or uneven_steps says what that failure means)
    _, traceback = task.signals.traceback
    if signals.input_exhausted and traceback.short_type in ("StopIteration", "OutOfRangeError"):
        return None  # input_exhausted says it
    if saves.failed_save_path(traceback, look):
        return None  # same_save_path says it
    if task.returncode in (None, 0) and not uncaught(task, script):
        return None  # printed, maybe handled: an error only once the task fails with it
    if traceback.short_type in CONSEQUENCES and task.signals.peer_reports:
        return None  # it failed because a peer was lost: peer_lost says which
    if signals.gloo_failure is not None:
        return None  # a JAX collective failed because a peer went away: jax_peer_lost says which
    # A tf.function's error is told as it raised it, where it raised it, not as TensorFlow's wrapper's first line.
    short_type, said, frame = traceback.error
    where = f" ({frame})" if frame else ""
    message = f": {known_errors.shortened(said)}" if said else ""
    fix = known_errors.explain(short_type, said or "")
    shared = saves.shared_save_named(said or "", look)
    if shared is not None:  # read back where every task writes: another task's file, or one being written
        fix = saves.read_while_saved(task, shared, look) + (f". {fix}" if fix else "")
    cause = f"{task.id} failed with {short_type}{message}{where}"
    return Diagnosis("error", task.position, cause + (f". {fix}" if fix else ""), evidence=list(traceback.lines[-6:]),
                     cause=cause, ended={task.position: f"failed with {traceback.short_type}"})


def keras3(task: TaskView, look: Look) -> Diagnosis | None:
    """Keras 3 under MultiWorkerMirroredStrategy: from `import keras`, or from the run's --env that made
    tf.keras Keras 3 too, whatever the script imports (then the variable is the cause)."""
    env = look.view.env
    if task.signals.keras3 is None:
        return None
    said = f"{task.id} ran Keras 3, which cannot train under MultiWorkerMirroredStrategy (keras-team/keras#20585)"
    if LEGACY_KERAS in env and not legacy_keras(env):
        fix = (f"the run's --env {LEGACY_KERAS}={env[LEGACY_KERAS]} made tf.keras Keras 3: leave that variable out "
               f"(kwnb sets {LEGACY_KERAS}=1, which makes tf.keras tf-keras)")
    else:
        fix = f"use tf.keras instead of `import keras` (kwnb sets {LEGACY_KERAS}=1 for tf-keras)"
    return Diagnosis("keras3", task.position, f"{said}: {fix}", evidence=list(task.signals.keras3[1].lines),
                     ended={task.position: "failed under Keras 3"})


def tf_config_overridden(task: TaskView, look: Look) -> Diagnosis | None:
    record = task.signals.tf_config_set
    if record is None or record.get("deleted"):
        return None  # deleted, not replaced: not_distributed says it
    try:
        import json

        cluster = json.loads(record["tf_config"]).get("cluster", {})
        addresses = ", ".join(a for kind in cluster.values() for a in kind)
    except (ValueError, TypeError, AttributeError, KeyError):
        addresses = "an address of its own"
    return Diagnosis("tf_config_overridden", task.position,
                     f"{task.id}'s script sets its own TF_CONFIG ({addresses}){changed_at(record)}, so the tasks do "
                     f"not form the cluster kwnb started: delete the line that sets os.environ['TF_CONFIG'] (kwnb "
                     f"gives each task its own)",
                     evidence=[str(record.get("tf_config", ""))[:300]])


def port_taken(task: TaskView, look: Look) -> Diagnosis | None:
    if task.signals.bind_failure is None or task.signals.tf_config_set is not None:
        return None
    return Diagnosis("port_taken", task.position,
                     f"{task.id} could not bind {task.address}: another program took the port after kwnb chose it; "
                     f"kwnb relaunches the cluster on new ports (up to 3 times)",
                     evidence=list(task.signals.bind_failure[1].lines))


def _memory_was_high(peak: int) -> bool:
    try:
        import psutil

        return peak > MEMORY_HINT_SHARE * psutil.virtual_memory().total or psutil.virtual_memory().percent > 90
    except Exception:
        return False


# ----- the table of kinds ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Kind:
    """One kind of diagnosis. `find(look)` (or `find(task, look)`, `each_task`) returns a Diagnosis, a list of
    them or None; None for `find`: another kind's function makes it (named in the comment). `origin`: it says
    where a failure started, for the run's reason (the earliest wins). `transient`: it describes a moment and
    is withdrawn when that passes; the others describe an event and stay. `ends`: it says how one attempt of a
    task ended, which a restart may recover from (engine/diagnoses/recovery.py). `follows`: a finding of it about a
    task whose end a root cause explains (Look.explained) is that root's consequence: worded so, linked to it and
    listed after it. `fails`: its task ended without an error code, yet the others cannot go on without it, so the
    failure policy counts that task as failed (engine/live/policy.py). The origins are asked first, so that the
    others find them (the module's docstring)."""

    name: str
    find: Callable | None
    origin: bool = False
    transient: bool = False
    ends: bool = False
    each_task: bool = False
    follows: bool = False
    fails: bool = False


# In the order a pass asks them, the origins first (ASKED): stall last (it reads what this pass found); its docs
# row in docs/diagnoses.md.
KINDS = (
    Kind("waiting_for_peers", waiting_for_peers, transient=True, follows=True),
    Kind("peer_lost", peer_lost, ends=True, follows=True),
    Kind("uneven_steps", training.uneven_steps, origin=True),  # and stalled's, as a stall (training.collective_hang)
    Kind("input_exhausted", training.input_exhausted, origin=True),
    Kind("nan_loss", training.nan_loss),
    Kind("not_distributed", not_distributed),  # finished but wrong
    Kind("diverging", diverging),
    # Before killed: the same SIGKILL, told by Ray; found in the same pass, these are the run's reason.
    Kind("ray_node_lost", ray_node_lost, origin=True, ends=True),  # --backend ray: which tasks the node held
    Kind("ray_memory_monitor", ray_memory_monitor, origin=True, ends=True, each_task=True),
    Kind("killed", killed, origin=True, ends=True, each_task=True),
    Kind("native_crash", native_crash, origin=True, ends=True, each_task=True),  # SIGSEGV, SIGABRT, ...: its own
    Kind("out_of_memory", None, origin=True, ends=True),  # killed's, with the OOM killer's evidence
    Kind("error", error, origin=True, ends=True, each_task=True),
    Kind("same_save_path", saves.same_save_path, origin=True, ends=True),  # a failed save's, or every worker's
    Kind("keras3", keras3, origin=True, each_task=True),
    Kind("tf_config_overridden", tf_config_overridden, origin=True, each_task=True),
    Kind("port_taken", port_taken, origin=True, transient=True, each_task=True),
    Kind("jax_alone", jax_alone, each_task=True),
    # A task that exited 0 before joining leaves the others in initialize() for 300 s: failed, for the policy.
    Kind("jax_not_joined", jax_not_joined, origin=True, ends=True, each_task=True, fails=True),
    Kind("jax_peer_lost", jax_peer_lost, ends=True),
    Kind("stalled", stall, transient=True),
)
ORIGINS = tuple(kind.name for kind in KINDS if kind.origin)
FOLLOWS = tuple(kind.name for kind in KINDS if kind.follows)
# The order a pass asks them: the root causes first, then the rest, each in the table's order.
ASKED = (tuple(kind for kind in KINDS if kind.origin), tuple(kind for kind in KINDS if not kind.origin))
TRANSIENT = tuple(kind.name for kind in KINDS if kind.transient)
ENDS = tuple(kind.name for kind in KINDS if kind.ends)
FAILS = tuple(kind.name for kind in KINDS if kind.fails)


def failed_by_findings(diagnoses: list[Diagnosis], tasks: list[TaskView]) -> tuple[int, ...]:
    """The positions of tasks a finding of a `fails` kind names, and that no restart has left behind since."""
    return tuple(sorted({d.task for d in diagnoses if d.kind in FAILS and d.task is not None
                         and not recovery.restarted_since(d, tasks[d.task], ENDS)}))
