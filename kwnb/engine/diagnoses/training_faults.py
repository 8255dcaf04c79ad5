"""Diagnoses of training that goes wrong once the cluster runs: tasks that ran different numbers of steps or
different collectives (`uneven_steps`), input that ran out (`input_exhausted`), a loss that became NaN
(`nan_loss`), and which task a stall is waiting for (the culprit named by `stalled`).

Each function reads what the tasks' logs showed (their views, engine/tasks/view.py: signals and metric facts) and
costs a few attribute reads per task: they run every 0.5 s. The message shapes are TF 2.21's, captured in
tests/data/tf-2.21/ (uneven-steps, shape-mismatch, input-exhausted-*, nan-loss).
"""
from __future__ import annotations

import math
import re
from . import stacks as stack_dumps
from ..readers import tf_messages as tf
from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look, reached

# Collective failures a task raises because a peer is gone or differs: consequences, not causes.
CONSEQUENCES = ("UnavailableError", "CancelledError", "AbortedError", "DeadlineExceededError")
SAME_STEPS = ("every task must run the same number of steps: in model.fit, repeat() the dataset and give every task "
              "the same steps_per_epoch, or use drop_remainder=True with equal shards; in a custom loop, the same "
              "number of iterations")
SAME_COLLECTIVES = ("Every task must run the same collectives in the same order: code under `if task_index == 0` "
                    "must not call fit, evaluate, save or strategy.reduce unless every task does")
# When every task had run all the steps its fit planned, the extra collective came after training.
SAME_AFTER = ("After training too, every task must run the same collectives: code under `if task_index == 0` (or "
              "any one task) must not call evaluate, save, a checkpoint or strategy.reduce unless every task does "
              "(under MultiWorkerMirroredStrategy every task calls model.save, the others to a temporary directory)")
# A main thread whose innermost frame is in these packages waits in TensorFlow (a collective, a step).
_FRAMEWORK = ("/tensorflow/", "/tf_keras/", "/keras/", "/tensorflow_core/")
TRACEBACK_WAIT_SECONDS = 5.0  # after a collective mismatch, for every task's traceback (which path it took)
_BATCHES = re.compile(r"in this case, (\d+) batches")


def _first(kind: str, candidates: list, current: list[Diagnosis]):
    """The task a run-wide finding is told on: the one it was first told on, else the earliest candidate.

    candidates: (time, task) pairs. Keeps one diagnosis per kind as more tasks show the same thing."""
    told = {d.task for d in current if d.kind == kind}
    for when, task in candidates:
        if task.position in told:
            return task
    return min(candidates, key=lambda pair: (pair[0], pair[1].position))[1] if candidates else None


def _at(task: TaskView) -> str:
    place = reached(task)
    return f" at {place}" if place else ""


# ----- uneven_steps ----------------------------------------------------------------------------------
def uneven_steps(look: Look) -> list[Diagnosis]:
    """A task finished its loop (exit 0) while a peer still trained, and the peer then failed in a collective;
    or tasks met in one collective with different shapes (they took different code paths). Among the tasks
    that train together (a sidecar evaluator never joins); a stall's form is collective_hang's."""
    tasks = look.members
    return [d for d in (_finished_early(tasks), _mismatch(tasks, look.current, look.now)) if d]


def _finished_early(tasks: list[TaskView]) -> Diagnosis | None:
    finished = [t for t in tasks if t.returncode == 0 and t.ended_at is not None]
    if not finished:
        return None
    early = min(finished, key=lambda t: t.ended_at)
    for peer in tasks:
        if peer is early or peer.started_at is None or peer.started_at > early.ended_at:
            continue
        failed = _failed_in_collective_after(peer, early)
        if failed:
            traceback = peer.signals.traceback
            frame = traceback[1].user_frame if traceback else None
            # the line where it waited: the learner's code, not TensorFlow's
            line, at_line = (f" ({frame})", f" at {frame}") if frame else ("", "")
            crash = "(TensorFlow calls it a crash; it was not)"
            if trained_all(early) and trained_all(peer):
                message = (f"{early.id} finished training and exited normally{_at(early)}; {peer.id} had finished "
                           f"training too, then ran a collective {early.id} never ran{line} and failed waiting for it "
                           f"{crash}: the tasks took different code paths after training. {SAME_AFTER}")
            else:
                peer_place = f" (it had reached {reached(peer)})" if reached(peer) else ""
                message = (f"{early.id} finished its training loop and exited normally{_at(early)} while {peer.id} "
                           f"was still training{peer_place}; {peer.id} then failed waiting for it in a collective"
                           f"{at_line} {crash}: {SAME_STEPS}")
            return Diagnosis("uneven_steps", early.position, message, evidence=failed)
    return None


def trained_all(task: TaskView) -> bool:
    """The task's output showed the last step of its fit's last epoch (a Keras bar with counts; a custom loop's
    own lines do not tell)."""
    return bool(task.total_epochs and task.steps_per_epoch and task.epoch == task.total_epochs - 1
                and task.step == task.steps_per_epoch)


def _failed_in_collective_after(peer: TaskView, early: TaskView) -> list[str] | None:
    """The evidence that `peer` failed in a collective because `early` had gone, or None."""
    if peer.stop_requested or peer.signals.mismatch is not None:
        return None
    blamed = [report for when, report in peer.signals.peer_reports
              if when >= early.ended_at - 1 and _names(report, early)]
    traceback = peer.signals.traceback
    raised = traceback is not None and traceback[0] >= early.ended_at - 1 and traceback[1].short_type in CONSEQUENCES
    # A report alone also comes when a peer ended normally long before (harmless): a failure must follow.
    if not (raised or peer.returncode not in (None, 0)) or not (blamed or raised):
        return None
    lines = [line for report in blamed[:2] for line in report.lines]
    return lines + (list(traceback[1].lines[-2:]) if raised else [])


def _names(report, task: TaskView) -> bool:
    if isinstance(report, tf.Unhealthy):
        return (task.task_type, task.index) in report.tasks
    return report.task == (task.task_type, task.index) or report.task is None


def _mismatch(tasks: list[TaskView], current: list[Diagnosis], now: float) -> Diagnosis | None:
    """TensorFlow's "Shape mismatch in the collective instance": the same line everywhere means the tasks ran
    different numbers of steps (fit with different steps_per_epoch); different lines, different code paths."""
    seen = [(t.signals.mismatch[0], t) for t in tasks if t.signals.mismatch is not None]
    if not seen:
        return None
    first_seen, event = min(when for when, _ in seen), seen[0][1].signals.mismatch[1]
    pending = [t for _, t in seen if t.alive and (t.signals.traceback is None or t.signals.traceback[0] < first_seen)]
    if pending and now - first_seen < TRACEBACK_WAIT_SECONDS:
        return None  # each task's traceback says which path it took: it follows the C++ lines within a second
    frames = {t.position: t.signals.traceback[1].where for t in tasks
              if t.signals.traceback is not None and t.signals.traceback[1].where is not None}
    told = next((d.task for d in current if d.kind == "uneven_steps"), None)  # one diagnosis, on one task
    said = f"they met in one collective with different tensors (TensorFlow: collective instance {event.instance})"
    if len(set(map(str, frames.values()))) > 1:
        chief = next((t for _, t in seen if t.is_chief), None)  # chief-only code (save, evaluate, reduce): the usual
        named = tasks[told] if told is not None else chief or seen[0][1]
        places = "; ".join(f"{tasks[p].id} in {frame}" for p, frame in sorted(frames.items()))
        message = f"the tasks took different code paths ({places}): {said}. {SAME_COLLECTIVES}"
    else:
        named, message = _same_line(tasks, told, said)
    return Diagnosis("uneven_steps", named.position, message, evidence=list(event.lines))


def _places(tasks: list[TaskView]) -> str:
    """Where each task was, as far as its output told."""
    return "; ".join(f"{t.id} at {reached(t)}" for t in tasks if reached(t)) or "see each task's log"


def _same_line(tasks: list[TaskView], told: int | None, said: str) -> tuple[TaskView, str]:
    """Both tasks failed in the same call (fit): different step counts, or, where every task planned the same
    steps, a collective inside fit that only some ran (a callback given to the chief alone)."""
    plans = [(t.steps_per_epoch, t.total_epochs) for t in tasks]
    if all(all(plan) for plan in plans) and len(set(plans)) == 1:
        chief = next((t for t in tasks if t.is_chief), tasks[0])  # callbacks given to the chief alone: the usual
        places = _places(tasks)
        return tasks[told] if told is not None else chief, (
            f"the tasks planned the same steps (an epoch is {plans[0][0]} steps on every task) but ran different "
            f"collectives inside model.fit ({places}): {said}. A callback that only some tasks have calls the "
            f"strategy (ModelCheckpoint, BackupAndRestore, or one that saves or evaluates): give every task the "
            f"same callbacks (under MultiWorkerMirroredStrategy every task saves, the others to a temporary "
            f"directory)")
    # The task that planned the fewest steps, where the output told (a verbose=2 bar shows them at an epoch's end)
    planned = [(t.steps_per_epoch * (t.total_epochs or 1), t.position, t) for t in tasks
               if t.steps_per_epoch]
    fewest = min(planned)[2] if planned else tasks[0]
    per_epoch = [t.steps_per_epoch for t in tasks]
    if all(per_epoch) and len(set(per_epoch)) > 1:  # what differs, and stays so (the last step drawn lags)
        counts = ", ".join(f"{n} on {t.id}" if i else f"{n} steps on {t.id}" for i, (n, t) in
                           enumerate(zip(per_epoch, tasks)))
        places = f"an epoch is {counts}, as their progress bars say"
    else:
        places = _places(tasks)
    return tasks[told] if told is not None else fewest, \
        f"the tasks ran different numbers of steps ({places}): {said}; {SAME_STEPS}"


# ----- input_exhausted -------------------------------------------------------------------------------
def input_exhausted(look: Look) -> Diagnosis | None:
    tasks, current = look.tasks, look.current
    seen = [(t.signals.input_exhausted[0], t) for t in tasks if t.signals.input_exhausted is not None]
    task = _first("input_exhausted", seen, current)
    if task is None:
        return None
    event = task.signals.input_exhausted[1]
    if event.source == "keras" and look.view.framework == "jax" and \
            (task.returncode is None or task.total_epochs and len(task.epochs) >= task.total_epochs):
        return None  # Keras 3 warns so in the first epoch of a sharded tf.data (its size unknown), and trains them all
    others = [t.id for _, t in seen if t is not task]
    also = f" (and {', '.join(map(str, others))})" if others else ""
    if event.source == "keras":
        bar = f", the last step drawn {event.step}/{event.steps}" if event.step else ""
        epoch = f" in epoch {task.epoch + 1}" if task.epoch is not None else ""
        batches = _BATCHES.search(event.lines[0])
        need = f" (fit asked for {batches.group(1)} batches here)" if batches else ""
        what = (f"{task.id}{also} ran out of input data{epoch}{bar}: model.fit stopped early (Keras: \"Your input "
                f"ran out of data\") and the task went on as if training had ended. Give it enough: .repeat() the "
                f"dataset and set steps_per_epoch, or make steps_per_epoch x epochs no more than the data gives{need}")
    else:
        traceback = task.signals.traceback
        line = f", {traceback[1].where}" if traceback and traceback[1].where else ""
        after = f" after {reached(task)}" if reached(task) else ""  # the last step it printed
        what = (f"{task.id}{also} ran out of input data{after}{line} (tf.data: OutOfRangeError, End of "
                f"sequence): .repeat() the dataset, or run only as many steps as each task's shard holds")
    return Diagnosis("input_exhausted", task.position, what, evidence=list(event.lines))


# ----- nan_loss --------------------------------------------------------------------------------------
def nan_loss(look: Look) -> Diagnosis | None:
    tasks, current = look.tasks, look.current
    seen = [(0.0 if t.is_chief else 1.0, t) for t in tasks
            if t.nonfinite is not None or t.signals.nonfinite is not None]
    task = _first("nan_loss", seen, current)  # the chief's curves first: every replica shows the same loss
    if task is None:
        return None
    causes = ("training has diverged. Usual causes: a learning rate too high, unscaled inputs (divide pixels by 255), "
              "a log of zero in a hand-written loss (clip it, or use from_logits=True)")
    row = task.nonfinite
    if row is None:  # a line of the learner's own loop, in a form kwnb reads no curve from: quote it
        event = task.signals.nonfinite[1]
        line = event.lines[0].strip()
        quoted = line if len(line) <= 100 else line[:97] + "..."
        return Diagnosis("nan_loss", task.position, f"{task.id}'s {event.name} became {event.value} (the first line "
                         f"that says so: \"{quoted}\"): {causes}", evidence=list(event.lines))
    bad = [k for k, v in row.items() if k not in ("epoch", "step") and not math.isfinite(v)]
    name = "loss" if "loss" in bad else bad[0]
    value = "NaN" if math.isnan(row[name]) else "infinite"
    at = f"epoch {row['epoch'] + 1}" if row.get("epoch") is not None else ""
    at += (", " if at else "") + f"step {row['step']}" if row.get("step") is not None else ""
    return Diagnosis("nan_loss", task.position,
                     f"{task.id}'s {name} became {value}" + (f" at {at}" if at else "") + f" (the first kwnb read): "
                     f"{causes}", evidence=[", ".join(f"{k}: {v}" for k, v in row.items())])


# ----- the stall's culprit ---------------------------------------------------------------------------
def culprits(dumps: dict[int, str]) -> list[int]:
    """Positions of the tasks whose main thread is not inside TensorFlow or Keras (blocked in the user's own
    code, or in a library it called): the others wait for them in a collective. Judged on the innermost frame
    outside the standard library: TensorFlow's all-reduce waits in multiprocessing.pool and threading too."""
    found = []
    for position, text in sorted(dumps.items()):
        owner = stack_dumps.innermost_owner(stack_dumps.main_thread(stack_dumps.threads(text)) or [])
        if owner and not owner[0].startswith("<") and not any(p in owner[0] for p in _FRAMEWORK):
            found.append(position)
    return found


def collective_hang(tasks: list[TaskView], dumps: dict[int, str], user_files: tuple, waited: str,
                    evidence: list) -> Diagnosis | None:
    """A stall where every live task waits inside TensorFlow: for a peer that exited normally (it ran fewer steps,
    or the others ran a collective after training it never ran), or in different collectives at different lines
    of the user's code (they took different code paths: where a chief-only collective hangs rather than failing
    with a shape mismatch). `waited`: where each one waits and for how long, as the stall says it. Not in a
    parameter-server job: its workers and ps serve in server.join() and the chief's waits are RPCs, not collectives
    (Kubeflow's dist_mnist under load read as 'the tasks wait in different collectives')."""
    if any(t.id.type == "ps" for t in tasks):
        return None
    finished = [t for t in tasks if t.returncode == 0]
    if finished:
        early, waiting = finished[0], [tasks[p] for p in dumps]
        if trained_all(early) and all(map(trained_all, waiting)):  # both done: an extra collective
            return Diagnosis("uneven_steps", early.position,
                             f"{early.id} finished training and exited normally; the others had finished training "
                             f"too and wait for it in a collective it never ran {waited}: the tasks took different "
                             f"code paths after training. {SAME_AFTER}", evidence=evidence)
        return Diagnosis("uneven_steps", early.position,
                         f"{early.id} finished its training loop and exited normally while the others still wait "
                         f"for it in a collective {waited}: {SAME_STEPS}", evidence=evidence)
    lines = {p: stack_dumps.user_frame(stack_dumps.main_thread(stack_dumps.threads(text)) or [], user_files)
             for p, text in dumps.items()}
    if len(dumps) > 1 and None not in lines.values() and len(set(lines.values())) > 1:
        named = next((tasks[p] for p in dumps if tasks[p].is_chief), tasks[min(dumps)])
        return Diagnosis("uneven_steps", named.position,
                         f"the tasks wait in different collectives {waited}: they took different code paths. "
                         f"{SAME_COLLECTIVES}", evidence=evidence)
    return None


