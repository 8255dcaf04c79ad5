"""The stall: every live task silent for --stall-after seconds. Which tasks' stacks the supervisor captures for it
(`wants_stacks`), and what the stacks say (`stalled`): where each task's main thread is blocked, and the culprit the
others wait for, where one is. diagnose.py's table asks `stall` last in a pass."""
from __future__ import annotations

from . import stacks as stack_dumps
from . import training_faults as training
from .diagnosis import Diagnosis, Look, RunView
from .peers import waiting_for_peers
from ..tasks.view import TaskView

# A task not yet joining (importing TensorFlow, loading data) prints nothing for long: with 6 learners' runs at
# once on 2 cores the join took up to 101 s (benchmarks/load.py). It counts as progressing for this long after
# its launch, and after that while it uses CPU.
STARTING_SECONDS = 300.0
STARTING_CPU_PERCENT = 2.0


def wants_stacks(view: RunView, now: float) -> list[int]:
    """The positions of the live tasks whose stacks the next pass needs: every live task is silent (a stall is
    suspected) and no stall has been told yet, or one with no culprit was last looked at --stall-after seconds ago.
    The supervisor captures them (stacks.capture: seconds)."""
    if not suspected(view, now, waiting_for_peers(Look(view, now))):
        return []
    standing = _standing_stall(view)
    if standing and not (_looks_again(standing) and now - view.stacks_at >= view.stall_after):
        return []
    # A task whose error reached the script's top level is exiting: its stacks handler may be gone already, and the
    # signal would end it as a kill (exit -12) told as one from outside (the corpus's keras-guide-multi-gpu-tf-mwms).
    return [task.position for task in view.tasks if task.alive and not uncaught(task, view.script)]


def uncaught(task: TaskView, script: str) -> bool:
    """Whether the task's last traceback reached the script's top level: uncaught, so the task is ending with it
    (exiting can take seconds)."""
    traceback = task.signals.traceback[1] if task.signals.traceback else None
    return traceback is not None and any(f.function == "<module>" and f.file.endswith(script) for f in traceback.frames)


def suspected(view: RunView, now: float, found: list[Diagnosis]) -> bool:
    live = [task for task in view.tasks if task.alive]
    waiting = any(d.kind == "waiting_for_peers" for d in found)
    return bool(view.stall_after and live and not waiting
                and not any(_progressing(t, now, view.stall_after) for t in live))


def stall(look: Look) -> Diagnosis | None:
    """`stalled` when every live task is silent and no task is told waiting for its peers (asked last, so that
    `look.found` holds this pass's waiting_for_peers); a stall told before stays as it was told."""
    view = look.view
    if not suspected(view, look.now, look.found):
        return None
    current = _standing_stall(view)
    if current is None or (_looks_again(current) and look.facts.stacks):
        return stalled(view, look.now, dict(look.facts.stacks))
    return current


def _standing_stall(view: RunView) -> Diagnosis | None:
    return next((d for d in view.diagnoses if d.kind in ("stalled", "uneven_steps")), None)


def _looks_again(standing: Diagnosis) -> bool:
    """A stall told with no culprit is looked at again (its stacks captured anew every --stall-after seconds while it
    lasts): the first look may come while the tasks are still in the same step (under load a first step's tracing
    outlasted an 8 s --stall-after), before one of them reaches the code that blocks."""
    return standing.kind == "stalled" and standing.task is None


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
        hang = training.collective_hang(list(tasks), dumps, view.user_files, f"({where}); {silent}", evidence,
                                        training.steps_advice(view.hand_sharding))
        if hang:
            return hang
    return Diagnosis("stalled", None, f"{silent}: {where} {stacks}", evidence=evidence)
