"""The kinds of a `--framework jax` run (Keras 3 on JAX across processes), from what its tasks said
(engine/readers/jax_messages.py) and how they ended. JAX's own timeouts are long (measured with jax 0.10 on 2
CPU processes): a process that never joins leaves the others silent for 300 s, a peer that dies mid-collective
leaves the survivor ~80 s before it aborts; kwnb sees the end at once and its failure policy stops the others.

- jax_alone: a task trained, or finished, and never began keras.distribution.initialize(): it trained alone.
- jax_not_joined: a task ended without a Python error (an exit code, a signal) before it joined, while the others
  wait for it in initialize(); one that exited 0, only while another began joining (if none did, no process
  called initialize() and each trained alone: jax_alone).
- jax_peer_lost: a task's collective failed because a peer went away (`Gloo AllReduce failed ... Connection
  closed by peer`), or JAX's coordinator gave up on a peer: told on the peer, with how it ended.
"""
from __future__ import annotations

from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look, ended

JAX = "jax"
INITIALIZE = "call keras.distribution.initialize() first, right after `import keras` and before any model, " \
             "tensor or jax.devices()"
REGISTER_SECONDS = 300  # jax.distributed.initialize's default initialization_timeout
HEARTBEAT_SECONDS = 80  # a peer's death to the survivor's abort, measured (jax 0.10: heartbeats every 10 s)


def _training(look: Look) -> list[TaskView]:
    return [task for task in look.tasks if task.training] if look.view.framework == JAX else []


def _joined(task: TaskView) -> bool:
    return task.signals.connected_at is not None or task.joined_before


def jax_alone(task: TaskView, look: Look) -> Diagnosis | None:
    """Trained (epochs read) or exited 0 without initialize(): the KERAS_DISTRIBUTION_* kwnb set were never read."""
    if task not in _training(look) or task.signals.jax_joining is not None or _joined(task):
        return None
    if not (task.epochs or task.returncode == 0):
        return None
    others = [t for t in _training(look) if t is not task]
    if not task.epochs and any(t.alive or t.signals.jax_joining is not None for t in others):
        return None  # it trained nothing, and another may wait for it: if one does, jax_not_joined tells that
    return Diagnosis("jax_alone", task.position,
                     f"{task.id} trained alone: its script never called keras.distribution.initialize(), so it "
                     f"joined no other process (no Gloo line in its log) and fit a model of its own; {INITIALIZE}",
                     evidence=[f"{task.id}: no 'Connecting to JAX distributed service' line"])


def jax_not_joined(task: TaskView, look: Look) -> Diagnosis | None:
    """Ended (not stopped by kwnb) before joining, while another task waits in initialize()."""
    tasks = _training(look)
    if task not in tasks or task.returncode is None or task.stop_requested or _joined(task):
        return None
    if task.signals.traceback is not None:
        return None  # `error` tells it, with the fix where kwnb knows one (initialize() after JAX work)
    waiting = [t for t in tasks if t is not task and t.alive and not _joined(t)]
    if task.returncode == 0:  # done with no initialize() (jax_alone): it keeps waiting only those that began joining
        waiting = [t for t in waiting if t.signals.jax_joining is not None]
    if not waiting:
        return None
    names = ", ".join(str(t.id) for t in waiting)
    cause = f"{task.id} {ended(task)} before it joined the others"
    return Diagnosis("jax_not_joined", task.position,
                     f"{cause}: {names} cannot train without it (JAX waits {REGISTER_SECONDS} s in "
                     f"keras.distribution.initialize() for a process that never joins); kwnb's failure policy ends "
                     f"the run instead (%kw_logs {look.view.name} {task.name} shows why it ended)",
                     evidence=[f"{t.id}: " + ("began joining, never connected" if t.signals.jax_joining else
                                              "not yet joining") for t in waiting], cause=cause)


def jax_peer_lost(look: Look) -> list[Diagnosis]:
    """A collective that failed because a peer went away, told on that peer (the one other task that ended
    otherwise than normally, or was stopped); without one, on the task that said it."""
    found: dict[int, Diagnosis] = {}
    tasks = _training(look)
    for reporter in tasks:
        report = reporter.signals.gloo_failure or reporter.signals.coordination_timeout
        if report is None:
            continue
        _, event = report
        gone = [t for t in tasks if t is not reporter and not t.stop_requested
                and (t.returncode not in (None, 0) or t.signals.stopped)]
        if not gone and any(t.stop_requested for t in tasks if t is not reporter):
            continue  # the peer it lost was being stopped, by kwnb or the user (a Stop): no fault of the run
        what = f"its {event.collective} failed ({event.reason})" if hasattr(event, "collective") else \
            "JAX's coordinator gave up on a process"
        for peer in gone or [reporter]:
            how = ended(peer) if peer.returncode is not None else "is stopped (SIGSTOP)" if peer.signals.stopped \
                else "still runs"
            said = f"{reporter.id} lost its peer {peer.id}, which {how}: " if peer is not reporter else \
                f"{reporter.id} lost a peer: "
            found.setdefault(peer.position, Diagnosis(
                "jax_peer_lost", peer.position,
                f"{said}{what}; JAX aborts the survivors only after ~{HEARTBEAT_SECONDS} s of missed heartbeats, "
                f"kwnb's failure policy ends them at once (--on-failure restart starts the cluster again)",
                evidence=list(event.lines)))
    return list(found.values())
