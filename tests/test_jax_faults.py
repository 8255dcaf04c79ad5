"""`jax_peer_lost` as values (engine/diagnoses/jax_faults.py): a collective that broke because a peer went away is
told on that peer, unless kwnb or the user was stopping it. The real failures are tests/test_jax.py's."""
from __future__ import annotations

from kwnb.engine.diagnoses import diagnose
from kwnb.engine.diagnoses.diagnosis import RunView
from kwnb.engine.readers.jax_messages import GlooFailed
from kwnb.engine.tasks.status import Status
from kwnb.engine.tasks.task import Signals
from kwnb.engine.tasks.view import TaskView
from kwnb.task.tf_config import TaskId

BROKE = GlooFailed(lines=("Gloo AllGather failed: [pair.cc:538] Read error [127.0.0.1]:28362: Connection closed by "
                          "peer",), collective="AllGather", reason="Connection closed by peer")


def task(position: int, code: int, stopping: bool, broke: bool = False) -> TaskView:
    signals = Signals(connected_at=1.0, gloo_failure=(5.0, BROKE) if broke else None)
    return TaskView(position, TaskId("worker", position), position == 0, Status.FAILED, "training", returncode=code,
                    alive=False, signals=signals, stop_requested=stopping, started_at=0.0, ended_at=6.0)


def lost(*tasks: TaskView) -> list[tuple[int, str]]:
    view = RunView(tasks=tasks, name="r", script="r.py", diagnoses=(), stall_after=0, restart_limit=0,
                   framework="jax")
    return [(d.task, d.message) for d in diagnose.findings(view, 10.0) if d.kind == "jax_peer_lost"]


def test_a_peer_killed_from_outside_is_lost_and_named():
    [(position, message)] = lost(task(0, 1, stopping=True, broke=True), task(1, -9, stopping=False))
    assert position == 1 and message.startswith("worker 0 lost its peer worker 1, which was killed by SIGKILL")


def test_a_run_its_user_stopped_tells_no_lost_peer():
    """A Stop ends both tasks; the one that outlives the other by a moment breaks its collective on the way out."""
    assert lost(task(0, -15, stopping=True, broke=True), task(1, -15, stopping=True)) == []
