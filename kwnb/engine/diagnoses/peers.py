"""The kinds about a task's peers: `waiting_for_peers` (a join that takes long, and who it waits for) and
`peer_lost` (a peer that ended or stopped answering, told on that peer, with how it went). Both can be a
consequence: where a root cause of the same pass says how the peer ended (Look.explained), they say it in
those words, as its consequence (engine/diagnoses/diagnose.py links them)."""
from __future__ import annotations

import functools
import socket

from ..readers import tf_messages as tf
from ..tasks.view import TaskView
from .diagnosis import Diagnosis, Look, ended as _ended

WAIT_SECONDS = 10.0  # TensorFlow's own heartbeat timeout; a join that takes longer is worth a word
PEER_GRACE_SECONDS = 3.0  # a peer reported gone while its process still runs: wait this long for its exit


def joining(tasks) -> list[TaskView]:
    """The tasks that join a cluster and log it: not a sidecar evaluator (outside the cluster), and none of a
    parameter-server job's: its workers and ps only serve, and its coordinator (a chief task or the notebook)
    connects to them without a coordination service, so no task of it ever logs a join."""
    if any(task.task_type == "ps" for task in tasks):
        return []
    return [task for task in tasks if task.task_type != "evaluator"]


def waiting_for_peers(look: Look) -> list[Diagnosis]:
    tasks, now = joining(look.tasks), look.now
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
                      f"{_state(straggler, now, look.explained(straggler.position), look.view.framework)}",
                      evidence=evidence)
            for straggler in stragglers]


def _waiting_since(task: TaskView) -> float | None:
    signals = task.signals
    if signals.waiting is not None:  # the coordination leader says how many it still waits for
        return signals.waiting_at
    if signals.server_at is not None and signals.connected_at is None:  # the others: up, not yet joined
        return signals.server_at
    return None


def _state(task: TaskView, now: float, root: tuple[Diagnosis, str] | None = None,
           framework: str = "tensorflow") -> str:
    if root is not None:  # a root cause of this pass says how it ended
        return f"{root[1]} before joining: a consequence of the {root[0].kind} above"
    if task.returncode is not None:
        return f"{_ended(task)} before joining: see %kw_logs {task.name}"
    if task.status == "pending":
        return "is still queued by the scheduler"
    if task.started_at is None:
        return "has not started"
    if framework == "jax":
        return (f"is still starting ({now - task.started_at:.0f} s since launch: importing JAX and Keras or loading "
                f"data); it joins when it calls keras.distribution.initialize()")
    return (f"is still starting ({now - task.started_at:.0f} s since launch: importing TensorFlow or loading "
            f"data); it joins when it creates its strategy")


def peer_lost(look: Look) -> list[Diagnosis]:
    tasks, now, oom_found = look.tasks, look.now, look.facts.oom
    lost: dict[int, Diagnosis] = {}
    for reporter in tasks:
        for when, report in reporter.signals.peer_reports:
            for peer in _peers_named(report, reporter, tasks):
                if peer.position in lost or peer.returncode == 0:
                    continue  # a peer that finished normally is reported unhealthy too: harmless
                if peer.stop_requested:
                    continue  # kwnb or the user stopped it (TensorFlow holds off TERM, so it was KILLed): no fault
                if peer.alive and not peer.signals.stopped and now - when < PEER_GRACE_SECONDS:
                    continue  # it may be exiting normally right now
                oom_killed = peer.returncode == -9 and oom_found.get(peer.position)
                root = look.explained(peer.position)  # the root cause of its end, found first in this pass
                how = root[1] if root else \
                    "was killed by the kernel's OOM killer" if oom_killed else \
                    _ended(peer) if peer.returncode is not None else \
                    "is stopped (SIGSTOP): it sends no heartbeats" if peer.signals.stopped else \
                    "still runs but stopped answering (overloaded, or its network is down)"
                cause = f"{reporter.id} lost its peer {peer.id}, which {how}"
                then = f": a consequence of the {root[0].kind} above, not a cause of its own; " if root else "; "
                lost[peer.position] = Diagnosis("peer_lost", peer.position, f"{cause}{then}the others cannot go on "
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
