"""Diagnoses: what a run's tasks are doing wrong, in one sentence each, from their logs and processes.

A pass is a pure function of values: `findings(view, now, facts)` reads a RunView (diagnosis.py: every
task's signals, engine/tasks/task.py, copied under the run's state lock) and the process facts the
supervisor gathered (ProcessFacts: the stacks of stalled tasks, the OOM killer's evidence) and returns
what holds now; `merge(current, found, now)` is how the run applies it to its diagnoses, keeping when
each was first seen. Two kinds describe a moment and are withdrawn when it passes (`waiting_for_peers`,
`stalled`, `port_taken`); the others describe an event and stay. A run whose tasks all exit 0 ends with
none: a peer that finished normally is never "lost".
"""
from __future__ import annotations

import functools
import signal
import socket
from dataclasses import dataclass, field
from typing import Mapping

from . import known_errors, recovery
from . import stacks as stack_dumps
from ..readers import tf_messages as tf
from ..tasks.view import TaskView
from . import training_faults as training
from .distribution import changed_at, not_distributed
from .divergence import diverging
from .diagnosis import Diagnosis, RunView, ended as _ended, signal_name
from .oom import OomEvidence
from ...machine.sizes import format_size

WAIT_SECONDS = 10.0  # TensorFlow's own heartbeat timeout; a join that takes longer is worth a word
PEER_GRACE_SECONDS = 3.0  # a peer reported gone while its process still runs: wait this long for its exit
TRANSIENT = ("waiting_for_peers", "stalled", "port_taken")
# Collective failures a task raises because a peer is gone: consequences, not causes.
CONSEQUENCES = training.CONSEQUENCES
# Kinds that say where a failure started, for the run's reason (the earliest wins).
ORIGINS = ("error", "killed", "out_of_memory", "uneven_steps", "input_exhausted", "keras3", "tf_config_overridden",
           "port_taken")
# A task not yet joining (importing TensorFlow, loading data) prints nothing for long: with 6 learners' runs at
# once on 2 cores the join took up to 101 s (benchmarks/load.py). It counts as progressing for this long after
# its launch, and after that while it uses CPU.
STARTING_SECONDS = 300.0
STARTING_CPU_PERCENT = 2.0
MEMORY_HINT_SHARE = 0.5  # peak memory above this share of the machine's makes the OOM killer a suspect


@dataclass(frozen=True)
class ProcessFacts:
    """What the supervisor gathered from the tasks' processes for one pass, by task position."""

    stacks: Mapping[int, str] = field(default_factory=dict)  # every live task's stacks, when a stall is suspected
    oom: Mapping[int, OomEvidence] = field(default_factory=dict)  # tasks SIGKILLed by the OOM killer


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
        diagnosis.since = now
        kept.append(diagnosis)
        new.append(diagnosis)
    return kept, new


def findings(view: RunView, now: float, facts: ProcessFacts = ProcessFacts()) -> list[Diagnosis]:
    """What holds now: a function of its inputs only (it reads no file and signals no process)."""
    tasks, current = list(view.tasks), list(view.diagnoses)
    members = [task for task in tasks if task.task_type != "evaluator"]  # a sidecar evaluator never joins
    found = [*waiting_for_peers(joining(tasks), now), *peer_lost(tasks, now, facts.oom),
             *training.uneven_steps(members, current, now)]
    found += [d for d in (training.input_exhausted(tasks, current), training.nan_loss(tasks, current)) if d]
    found += [d for d in (not_distributed(tasks, current), diverging(tasks, current)) if d]  # finished but wrong
    for task in tasks:
        found += [d for d in (killed(task, facts.oom.get(task.position)), error(task, view.script),
                              keras3(task, view.env),
                              tf_config_overridden(task), port_taken(task)) if d]
    stall = _stall(view, now, facts.stacks) if _stall_suspected(view, now, found) else None
    # The ends a restart left behind first, so that a task that ended the same way again is said as that new end
    # (merge: the last finding of a kind and task wins).
    return recovery.after_restarts(current, tasks, view.restart_limit) + \
        recovery.attempts_of(found + [stall] * bool(stall), tasks)


def wants_stacks(view: RunView, now: float) -> list[int]:
    """The positions of the live tasks whose stacks the next pass needs: every live task is silent (a stall is
    suspected) and no stall has been told yet. The supervisor captures them (stacks.capture: seconds)."""
    if not _stall_suspected(view, now, waiting_for_peers(joining(view.tasks), now)):
        return []
    if any(d.kind in ("stalled", "uneven_steps") for d in view.diagnoses):
        return []
    return [task.position for task in view.tasks if task.alive]


def _stall_suspected(view: RunView, now: float, found: list[Diagnosis]) -> bool:
    live = [task for task in view.tasks if task.alive]
    waiting = any(d.kind == "waiting_for_peers" for d in found)
    return bool(view.stall_after and live and not waiting
                and not any(_progressing(t, now, view.stall_after) for t in live))


def _stall(view: RunView, now: float, dumps: Mapping[int, str]) -> Diagnosis:
    current = next((d for d in view.diagnoses if d.kind in ("stalled", "uneven_steps")), None)
    return current or stalled(view, now, dict(dumps))


def _progressing(task: TaskView, now: float, window: float) -> bool:
    """New output within the window, or still starting (importing TensorFlow, loading data): under load an
    import can take longer than the window with nothing printed, and a one-second CPU sample can read 0."""
    if now - task.signals.progress_at < window:
        return True
    if task.phase not in ("pending", "starting"):
        return False
    cpu = task.cpu_percent
    launched = task.started_at or now
    return now - launched < max(STARTING_SECONDS, window) or cpu is None or cpu >= STARTING_CPU_PERCENT


def origin(diagnoses: list[Diagnosis], tasks: list[TaskView]) -> Diagnosis | None:
    """The task where a failure started (the one that raised or was killed), for the run's reason."""
    # Not a sidecar evaluator's: its failure is not training's (engine/tasks/roles.py); nor one a restart of its
    # task left behind (engine/diagnoses/recovery.py): a later failure is not that one.
    causes = [d for d in diagnoses if d.kind in ORIGINS and d.task is not None and tasks[d.task].training
              and not recovery.restarted_since(d, tasks[d.task])]
    return min(causes, key=lambda d: d.since) if causes else None


def joining(tasks) -> list[TaskView]:
    """The tasks that join a cluster and log it: not a sidecar evaluator (outside the cluster), and none of a
    parameter-server job's: its workers and ps only serve, and its coordinator (a chief task or the notebook)
    connects to them without a coordination service, so no task of it ever logs a join."""
    if any(task.task_type == "ps" for task in tasks):
        return []
    return [task for task in tasks if task.task_type != "evaluator"]


# ----- one function per kind -------------------------------------------------------------------------
def waiting_for_peers(tasks: list[TaskView], now: float) -> list[Diagnosis]:
    waiting = [(task, since) for task in tasks if task.alive and (since := _waiting_since(task)) is not None]
    waited = [(task, since) for task, since in waiting if now - since > WAIT_SECONDS]
    if not waited:
        return []
    waiter, since = min(waited, key=lambda pair: pair[1])
    named = {s for task, _ in waiting if task.signals.waiting for s in task.signals.waiting.stragglers}
    stragglers = [t for t in tasks if (t.task_type, t.index) in named] or \
        [t for t in tasks if t.signals.connected_at is None and t not in [w for w, _ in waiting]]
    evidence = list(waiter.signals.waiting.lines) if waiter.signals.waiting else []
    return [Diagnosis("waiting_for_peers", straggler.position,
                      f"{waiter.id} has waited {now - since:.0f} s for {straggler.id} to join; {straggler.id} "
                      f"{_state(straggler, now)}", evidence=evidence) for straggler in stragglers]


def _waiting_since(task: TaskView) -> float | None:
    signals = task.signals
    if signals.waiting is not None:  # the coordination leader says how many it still waits for
        return signals.waiting_at
    if signals.server_at is not None and signals.connected_at is None:  # the others: up, not yet joined
        return signals.server_at
    return None


def _state(task: TaskView, now: float) -> str:
    if task.returncode is not None:
        return f"{_ended(task)} before joining: see %kw_logs {task.name}"
    if task.status == "pending":
        return "is still queued by the scheduler"
    if task.started_at is None:
        return "has not started"
    return (f"is still starting ({now - task.started_at:.0f} s since launch: importing TensorFlow or loading "
            f"data); it joins when it creates its strategy")


def peer_lost(tasks: list[TaskView], now: float, oom_found: Mapping[int, OomEvidence]) -> list[Diagnosis]:
    lost: dict[int, Diagnosis] = {}
    for reporter in tasks:
        for when, report in reporter.signals.peer_reports:
            for peer in _peers_named(report, reporter, tasks):
                if peer.position in lost or peer.returncode == 0:
                    continue  # a peer that finished normally is reported unhealthy too: harmless
                if peer.alive and not peer.signals.stopped and now - when < PEER_GRACE_SECONDS:
                    continue  # it may be exiting normally right now
                oom_killed = peer.returncode == -9 and oom_found.get(peer.position)
                how = "was killed by the kernel's OOM killer" if oom_killed else \
                    _ended(peer) if peer.returncode is not None else \
                    "is stopped (SIGSTOP): it sends no heartbeats" if peer.signals.stopped else \
                    "still runs but stopped answering (overloaded, or its network is down)"
                cause = f"{reporter.id} lost its peer {peer.id}, which {how}"
                lost[peer.position] = Diagnosis("peer_lost", peer.position, f"{cause}; the others cannot go on "
                                                f"without it", evidence=list(report.lines), cause=cause)
    return list(lost.values())


def _peers_named(report, reporter: TaskView, tasks: list[TaskView]) -> list[TaskView]:
    if isinstance(report, tf.Unhealthy):
        names = set(report.tasks)
    elif report.task is not None:
        names = {report.task}
    else:  # an address, or nothing: the task listening there, else the one other task that went wrong
        named = [t for t in tasks if t is not reporter and report.address and _same_address(t.address, report.address)]
        suspects = [t for t in tasks if t is not reporter and (t.returncode not in (None, 0) or t.signals.stopped)]
        return named or (suspects if len(suspects) == 1 else [])
    return [t for t in tasks if (t.task_type, t.index) in names and t is not reporter]


def _same_address(address: str, reported: str) -> bool:
    """host:port against what gRPC reports (ipv4:10.0.0.2:PORT): the same port on the same host, so
    that tasks sharing a port on different nodes (Slurm) are told apart."""
    host, _, port = address.rpartition(":")
    other_host, _, other_port = reported.rpartition(":")
    return bool(port) and port == other_port and _resolved(host) == _resolved(other_host)


@functools.lru_cache(maxsize=64)
def _resolved(host: str) -> str:
    try:
        return socket.gethostbyname(host.strip("[]"))
    except OSError:
        return host


def killed(task: TaskView, found: OomEvidence | None = None) -> Diagnosis | None:
    """A kill from outside kwnb, or (`found`: the OOM killer's evidence the supervisor gathered) out_of_memory."""
    code = task.returncode
    if code is None or task.stop_requested or task.killed_by_kwnb or not (code < 0 or code == 128 + 9):
        return None
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
                     evidence=[f"exit code {code}"] + [memory] * bool(memory), cause=cause)


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
                     f"a kill from outside", evidence=[f"exit code {task.returncode}", *found.lines], cause=cause)


def error(task: TaskView, script: str) -> Diagnosis | None:
    signals = task.signals
    if signals.traceback is None or task.stop_requested or signals.keras3 or signals.bind_failure or signals.mismatch:
        return None  # (keras3, port_taken, tf_config_overridden or uneven_steps says what that failure means)
    _, traceback = task.signals.traceback
    if signals.input_exhausted and traceback.short_type in ("StopIteration", "OutOfRangeError"):
        return None  # input_exhausted says it
    # Reached the script's top level: uncaught, so the task is ending with it (exiting can take seconds).
    uncaught = any(f.function == "<module>" and f.file.endswith(script) for f in traceback.frames)
    if task.returncode in (None, 0) and not uncaught:
        return None  # printed, maybe handled: an error only once the task fails with it
    if traceback.short_type in CONSEQUENCES and task.signals.peer_reports:
        return None  # it failed because a peer was lost: peer_lost says which
    where = f" ({traceback.where})" if traceback.where else ""
    message = f": {traceback.message}" if traceback.message else ""
    fix = known_errors.explain(traceback.short_type, traceback.message or "")
    cause = f"{task.id} failed with {traceback.short_type}{message}{where}"
    return Diagnosis("error", task.position, cause + (f". {fix}" if fix else ""), evidence=list(traceback.lines[-6:]),
                     cause=cause)


LEGACY_KERAS = "TF_USE_LEGACY_KERAS"  # tf.keras is tf-keras only where it is one of TensorFlow's true words
LEGACY_TRUE = ("1", "true", "True")


def keras3(task: TaskView, env: Mapping[str, str] = {}) -> Diagnosis | None:
    """Keras 3 under MultiWorkerMirroredStrategy: from `import keras`, or from the run's --env (`env`) that
    made tf.keras Keras 3 too, whatever the script imports (then the variable is the cause)."""
    if task.signals.keras3 is None:
        return None
    said = f"{task.id} ran Keras 3, which cannot train under MultiWorkerMirroredStrategy (keras-team/keras#20585)"
    if LEGACY_KERAS in env and env[LEGACY_KERAS] not in LEGACY_TRUE:
        fix = (f"the run's --env {LEGACY_KERAS}={env[LEGACY_KERAS]} made tf.keras Keras 3: leave that variable out "
               f"(kwnb sets {LEGACY_KERAS}=1, which makes tf.keras tf-keras)")
    else:
        fix = f"use tf.keras instead of `import keras` (kwnb sets {LEGACY_KERAS}=1 for tf-keras)"
    return Diagnosis("keras3", task.position, f"{said}: {fix}", evidence=list(task.signals.keras3[1].lines))


def tf_config_overridden(task: TaskView) -> Diagnosis | None:
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


def port_taken(task: TaskView) -> Diagnosis | None:
    if task.signals.bind_failure is None or task.signals.tf_config_set is not None:
        return None
    return Diagnosis("port_taken", task.position,
                     f"{task.id} could not bind {task.address}: another program took the port after kwnb chose it; "
                     f"kwnb relaunches the cluster on new ports (up to 3 times)",
                     evidence=list(task.signals.bind_failure[1].lines))


def stalled(view: RunView, now: float, dumps: dict[int, str]) -> Diagnosis:
    """Every live task silent for view.stall_after seconds: where each one's main thread is blocked (`dumps`: the
    stacks the supervisor captured), and the task the others wait for (its main thread is in the user's code,
    theirs in TensorFlow), where one is."""
    tasks = view.tasks
    places, evidence = {}, [text for _, text in sorted(dumps.items())]
    for position, text in sorted(dumps.items()):
        frame = stack_dumps.blocked_at(text, view.user_files)
        places[position] = f"{tasks[position].id} in {frame}" if frame else f"{tasks[position].id} (no stack)"
    where = "; ".join(places.values()) or "no task answered with its stacks"
    silent = f"no task has made progress for {view.stall_after:g} s"
    stacks = f"(%kw_stack {view.name} shows every thread)"
    blocked = training.culprits(dumps)
    if len(blocked) == 1 and len(dumps) > 1:
        culprit, waiting = tasks[blocked[0]], [tasks[p].id for p in dumps if p != blocked[0]]
        return Diagnosis("stalled", culprit.position,
                         f"{places[culprit.position]}: it is blocked in its own code and "
                         f"{', '.join(map(str, waiting))} wait{'s' * (len(waiting) == 1)} for it in a collective; "
                         f"{silent} {stacks}", evidence=evidence)
    if dumps and not blocked:  # every live task waits inside TensorFlow: for a peer that left, or another collective
        hang = training.collective_hang(list(tasks), dumps, view.user_files, f"({where}); {silent}", evidence)
        if hang:
            return hang
    return Diagnosis("stalled", None, f"{silent}: {where} {stacks}", evidence=evidence)


def _memory_was_high(peak: int) -> bool:
    try:
        import psutil

        return peak > MEMORY_HINT_SHARE * psutil.virtual_memory().total or psutil.virtual_memory().percent > 90
    except Exception:
        return False
