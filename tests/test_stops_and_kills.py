"""Whose fault a task's end is, as values: `jax_peer_lost` (engine/diagnoses/jax_faults.py) tells a collective that
broke because a peer went away on that peer, unless kwnb or the user was stopping it; `out_of_memory`'s evidence
(engine/diagnoses/oom.py) is not another process's OOM kill. The real failures are tests/test_jax.py's and
tests/test_training_faults.py's."""
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


# ----- the OOM killer's evidence (engine/diagnoses/oom.py), as the corpus's killed JAX process met it -----------
def test_another_process_oom_killed_meanwhile_is_no_evidence_where_the_kernel_log_says_whom(monkeypatch):
    """A task SIGKILLed from outside while the OOM killer ended another process of the machine (the suite's OOM
    test in the other worker): the machine's counter grew, but the readable kernel log does not name the task."""
    from kwnb.engine.diagnoses import oom

    monkeypatch.setattr(oom.limits, "machine_oom_kills", lambda: 29)  # 28 when the task started
    monkeypatch.setattr(oom, "kernel_log", lambda since=0.0: ["Out of memory: Killed process 4242 (python)"])
    seen = oom.Watched(pid=1234, cgroup=None, kills=None, machine_kills=28, limit=1 << 30, limit_source="machine",
                       started=0.0)
    assert oom._evidence(seen) is None
    monkeypatch.setattr(oom, "kernel_log", lambda since=0.0: None)  # unreadable: the counter is all there is
    assert oom._evidence(seen).lines == ("/proc/vmstat: oom_kill 28 -> 29",)
