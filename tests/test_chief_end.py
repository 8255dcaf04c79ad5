"""The end of a chief job (`--chief`): the chief's exit decides the run, as TensorFlow and a TFJob's
default success policy decide a job, and tasks still running a grace period after it finished are stopped
(a TFJob's CleanPodPolicy removes them).

The rules are the failure policy's (engine/live/policy.py), a pure function of a View, tested here alone; one
run on plain-Python tasks (a second or two) checks that the supervisor carries them out.
"""
from __future__ import annotations

from test_roles import launch_roles

from kwnb.engine.live import policy
from kwnb.engine.live.log import LOG_NAME
from kwnb.engine.tasks.status import Status
from kwnb.engine.tasks.view import TaskView
from kwnb.task.tf_config import TaskId


def task(name, status=Status.RUNNING, code=None, ended_at=None, stop_requested=False):
    """A task as the policy reads it (engine/tasks/view.py); its role is its type ("evaluator 0": a sidecar)."""
    return TaskView(0, TaskId.parse(name), name.startswith("chief"), status, status, returncode=code,
                    address="localhost:1", alive=status == Status.RUNNING, ended_at=ended_at,
                    stop_requested=stop_requested)


CHIEF = task("chief 0", Status.FINISHED, 0, ended_at=100.0)


def view(*tasks, now=105.0, **changes) -> policy.View:
    base = dict(now=now, started_at=90.0, timeout=None, stopping=False, on_failure="stop", max_restarts=3,
                failure_grace=5.0, restarts=0, port_retries=0, queued=0.0, failed_at=None, origin=None,
                tasks=tasks, chief_grace=10.0)
    return policy.View(**{**base, **changes})


# ----- the policy alone -----------------------------------------------------------------------------

def test_tasks_outliving_a_finished_chief_are_stopped_after_the_grace_period():
    running = task("worker 0")
    assert policy.decide(view(CHIEF, running, now=109.9)) == policy.Decision(policy.KEEP)  # within the grace
    late = policy.decide(view(CHIEF, running, now=110.5))
    assert late.action == policy.STOP_REST and late.stop == ("worker 0",) and late.reason == ""
    assert late.note == ("the chief finished; stopped worker 0 that was still running 10.5 s later "
                         "(the chief's exit decides a chief job)")
    # ps tasks too, never a sidecar evaluator: it keeps its own grace period, from training's end (roles.py)
    evaluator = task("evaluator 0")
    both = policy.decide(view(CHIEF, running, task("ps 0"), evaluator, now=111.0))
    assert both.stop == ("worker 0", "ps 0") and "stopped worker 0 and ps 0 that were still running 11 s" in both.note
    assert policy.decide(view(CHIEF, evaluator, now=200.0)).action == policy.KEEP
    # unless the backend stops a job's tasks together (Slurm): then the note names the evaluator too
    slurm = policy.decide(view(CHIEF, running, evaluator, now=111.0, single_tasks=False))
    assert slurm.stop == ("worker 0", "evaluator 0") and "stopped worker 0 and evaluator 0 that were" in slurm.note
    assert policy.decide(view(CHIEF, evaluator, now=200.0, single_tasks=False)).action == policy.KEEP
    # a task being stopped already is not stopped again (the note is said once)
    assert policy.decide(view(CHIEF, task("worker 0", stop_requested=True), now=200.0)).action == policy.KEEP


def test_a_worker_failing_beside_a_finished_chief_does_not_fail_the_run():
    after = task("worker 1", Status.FAILED, 1, ended_at=101.0)
    for on_failure in ("stop", "restart", "keep"):  # neither stopped after failure_grace nor restarted
        decided = policy.decide(view(CHIEF, task("worker 0", Status.FINISHED, 0, 100.2), after, now=120.0,
                                     on_failure=on_failure, failed_at=101.0, origin="worker 1 raised ValueError"))
        assert decided.action == policy.KEEP
        assert decided.reason == "the chief finished (exit 0); worker 1 failed after it (exit code 1)"
    # with a worker still running: stopped after the chief's grace period, the reason said with the note
    late = policy.decide(view(CHIEF, task("worker 0"), after, now=111.0))
    assert late.action == policy.STOP_REST and late.stop == ("worker 0",) and "worker 1 failed after it" in late.reason
    before = task("worker 1", Status.FAILED, 3, ended_at=99.0)  # the chief finished within the failure's grace
    assert policy.decide(view(CHIEF, before, failed_at=99.0)).reason == \
        "the chief finished (exit 0); worker 1 failed before it (exit code 3)"


def test_a_failed_chief_and_a_run_without_a_chief_task_follow_the_failure_policy():
    failed_chief = task("chief 0", Status.FAILED, 2, ended_at=100.0)
    first = policy.decide(view(failed_chief, task("worker 0")))
    assert first.action == policy.KEEP and first.failed_at == 105.0
    stopped = policy.decide(view(failed_chief, task("worker 0"), now=111.0, failed_at=105.0))
    assert stopped.action == policy.STOP and stopped.reason.startswith("chief 0 failed with exit code 2")
    assert policy.decide(view(failed_chief, task("worker 0"), on_failure="restart")).action == policy.RESTART
    # No chief task: worker 0 acts as chief in the script, but every worker's end counts; none is stopped for it.
    worker0 = task("worker 0", Status.FINISHED, 0, ended_at=100.0)
    assert policy.decide(view(worker0, task("worker 1"), now=1000.0)).action == policy.KEEP
    failed = task("worker 1", Status.FAILED, 1, ended_at=101.0)
    assert policy.decide(view(worker0, failed, now=102.0)).reason == "worker 1 failed with exit code 1"
    # --timeout and a stop under way come first
    assert policy.decide(view(CHIEF, task("worker 0"), now=200.0, timeout=50.0)).timed_out
    assert policy.decide(view(CHIEF, task("worker 0"), now=200.0, stopping=True)).action == policy.KEEP


# ----- a run ----------------------------------------------------------------------------------------

def test_workers_and_ps_outliving_the_chief_are_stopped_and_the_run_finishes(tmp_path):
    """The chief exits 0 at once; a worker that ignores SIGTERM (as TensorFlow's do) and a ps task serve on;
    the evaluator then gets its own grace period, from the end of training, as before."""
    run = launch_roles(tmp_path, "chief=0.1", "worker=60", "worker_term=ignore", "ps=60", "evaluator=60",
                       chief=True, ps=1, evaluator=True, chief_grace=0.5, stop_grace=0.5, evaluator_grace=1.0)
    assert run.wait(timeout=40) and run.done, run.summary()
    chief, worker, ps, evaluator = run.workers
    assert (chief.status, worker.status, ps.status, evaluator.status) == ("finished", "stopped", "stopped",
                                                                         "stopped"), run.summary()
    assert worker.returncode == -9 and ps.returncode == -15  # TERM ignored: KILL after stop_grace
    assert 0.5 <= worker.ended_at - chief.ended_at < 10 and 0.5 <= ps.ended_at - chief.ended_at < 10
    assert evaluator.ended_at - max(worker.ended_at, ps.ended_at) >= 1.0
    assert run.status == "finished" and run.reason == "", run.summary()
    stopped = [note for note in run.notes if note.startswith("the chief finished; stopped worker 0 and ps 0 that "
                                                              "were still running")]
    assert len(stopped) == 1, run.notes
    assert "note: " + stopped[0] in run.summary()
    assert "failure policy: stop_rest (the chief finished; stopped" in (run.dir / LOG_NAME).read_text()
    assert run.diagnoses == [] and run.diagnosis_history == []  # kwnb stopped them: no `killed`, no failure
