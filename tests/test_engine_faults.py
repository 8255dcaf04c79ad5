"""Faults injected into the engine itself (issue 21): every run ends, a failed launch leaves nothing,
the failure policy decides from a view and the user's own restarts do not use up its budget.

Injected with the standard library only: a monkeypatched function that raises, a Popen that fails
for the second task. The workers are plain Python (no TensorFlow), so each test takes seconds.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import kwnb
from kwnb.backends import warm as warm_pool
from kwnb.backends.base import BOOTSTRAP
from kwnb.backends.local import LocalLauncher, LocalProcess
from kwnb.engine.diagnoses import diagnose
from kwnb.engine.live import policy
from kwnb.engine.live.log import LOG_NAME
from kwnb.engine.live.run import Run
from kwnb.engine.readers import tensorboard_import
from kwnb.engine.tasks.status import Status
from kwnb.engine.tasks.task import Signals
from kwnb.engine.tasks.view import TaskView
from kwnb.task.tf_config import TaskId
from kwnb.errors import LaunchError, NotPossible

SCRIPTS = Path(__file__).parent / "scripts"
BEHAVE = SCRIPTS / "behave.py"


pytestmark = pytest.mark.usefixtures("stop_leftover_runs")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class FinishFails(LocalLauncher):
    """A launcher whose end-of-run step raises, as Slurm's scancel timing out would."""

    def finish(self):
        super().finish()
        raise subprocess.TimeoutExpired(["scancel", "1"], 30)


def test_a_supervisor_that_raises_still_ends_the_run_stops_the_tasks_and_says_why(tmp_path, monkeypatch):
    calls, real_findings = [], diagnose.findings

    def findings(view, now, facts):
        calls.append(now)
        if len(calls) == 3:
            raise RuntimeError("injected on the third call")
        return real_findings(view, now, facts)

    monkeypatch.setattr(diagnose, "findings", findings)
    ended = []
    run = kwnb.launch(BEHAVE, n=2, name="supervisor-fault", args=["--sleep", "60"], runs_dir=tmp_path / "runs",
                      launcher=FinishFails(network="host", warm=False), on_end=[ended.append])
    pids = [task.pid for task in run.workers]
    codes = run.wait(timeout=60)
    assert run.done, "the run was left open: wait(), %kw_wait and the dashboard would wait forever"
    assert len(calls) >= 3
    assert None not in codes and all(gone(pid) for pid in pids), [task.status for task in run.workers]
    assert run.status == Status.FAILED == "failed"
    assert "supervisor failed (RuntimeError: injected on the third call" in run.reason, run.reason
    assert ended == [run], "the on_end callbacks were skipped"
    assert any(note.startswith("finishing the launcher failed:") for note in run.notes), run.notes
    log = (run.dir / LOG_NAME).read_text()
    assert "Traceback" in log and "injected on the third call" in log and "TimeoutExpired" in log
    assert run.ended_at is not None and run.ended_at >= run.started_at
    assert "kwnb's supervisor failed" in run.summary()


def test_a_launch_that_fails_for_the_second_task_stops_the_first_and_releases_the_pool(tmp_path, monkeypatch):
    real_popen, started = subprocess.Popen, []

    def popen(argv, *args, **kwargs):  # EAGAIN from fork for the second task, as a full process table gives
        if BOOTSTRAP in argv:
            if len(started) == 1:
                raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
            started.append(real_popen(argv, *args, **kwargs))
            return started[-1]
        return real_popen(argv, *args, **kwargs)

    ended = []
    real_run_ended = warm_pool.POOL.run_ended
    monkeypatch.setattr(warm_pool.POOL, "run_ended",
                        lambda launcher, *args, **kwargs: (ended.append(launcher), real_run_ended(launcher, *args,
                                                                                                  **kwargs)))
    monkeypatch.setattr(subprocess, "Popen", popen)
    launcher = LocalLauncher(network="host", warm=False)
    run = Run(BEHAVE, n=2, name="half-launch", args=["--sleep", "60"], runs_dir=tmp_path / "runs", launcher=launcher)
    with pytest.raises(LaunchError) as raised:
        run.start()
    message = str(raised.value)
    assert "could not start worker 1" in message and "Resource temporarily unavailable" in message, message
    assert "\n" not in message  # one line for the magic and the CLI to print
    assert len(started) == 1 and started[0].poll() is not None, "the first worker was left running"
    assert gone(started[0].pid)
    assert ended == [launcher], "the launcher was not finished: the warm pool would count the run as active"
    assert run.done and run.status == "failed" and run.reason.startswith("could not start")
    assert run.wait(timeout=1) == [None, None]
    # Through kwnb.launch: the same error, and no run kept.
    monkeypatch.setattr(subprocess, "Popen", popen)
    started.clear()
    with pytest.raises(LaunchError):
        kwnb.launch(BEHAVE, n=2, name="half-launch-2", args=["--sleep", "60"], runs_dir=tmp_path / "runs",
                    launcher=LocalLauncher(network="host", warm=False))
    assert all(gone(process.pid) for process in started)
    assert "half-launch-2" not in [r.name for r in kwnb.runs()]


def test_stop_before_start_ends_the_run_and_start_after_it_refuses(tmp_path):
    run = Run(BEHAVE, n=2, name="never-started", runs_dir=tmp_path / "runs",
              launcher=LocalLauncher(network="host", warm=False))
    assert run.stop() == [None, None]
    assert run.done and run.status == Status.STOPPED and run.reason == "stopped by the user"
    with pytest.raises(NotPossible):
        run.start()
    assert all(task.pid is None for task in run.workers)


WAIT_FOR_GO = """
import json, os, sys, time
from pathlib import Path
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
go, failed = Path(sys.argv[1]), Path(sys.argv[2])
print(f"worker {index} started", flush=True)
deadline = time.time() + 60
while not go.exists() and time.time() < deadline:
    time.sleep(0.05)
if index == 1 and not failed.exists():
    failed.write_text("once")
    sys.exit(3)
"""


def test_the_users_restarts_neither_use_up_max_restarts_nor_are_overwritten_by_a_cluster_restart(tmp_path):
    script, go, failed = tmp_path / "wait_for_go.py", tmp_path / "go", tmp_path / "failed"
    script.write_text(WAIT_FOR_GO)
    run = kwnb.launch(script, n=2, args=[str(go), str(failed)], runs_dir=tmp_path / "runs", on_failure="restart",
                      max_restarts=1, launcher=LocalLauncher(network="host", warm=False))
    run.restart(0)  # the user's: must not use up the failure policy's one restart
    assert run.user_restarts == 1 and run.restarts == 0
    go.write_text("go")  # now worker 1 fails once, and the policy restarts the cluster
    assert run.wait(timeout=60) == [0, 0], run.summary()
    assert run.restarts == 1 and run.user_restarts == 1
    assert [task.restarts for task in run.workers] == [2, 1]  # worker 0: once by the user, once with the cluster
    assert "restart 1 of the cluster: worker 1 exited with 3" in run.logs(1)
    log = (run.dir / LOG_NAME).read_text()
    assert "failure policy: restart" in log


# ----- the failure policy alone: a pure function of a view ------------------------------------------

def task_view(position, status, code, address, bind_failed=False, own_tf_config=False) -> TaskView:
    """Worker `position` as the policy reads it; `bind_failed`, `own_tf_config`: what its log showed."""
    signals = Signals(bind_failure=(1.0, "bind failed") if bind_failed else None,
                      tf_config_set={"tf_config": "{}"} if own_tf_config else None)
    return TaskView(position, TaskId("worker", position), position == 0, status, status, returncode=code,
                    address=address, alive=status == Status.RUNNING, signals=signals)


def view(**changes) -> policy.View:
    task = task_view(0, Status.RUNNING, None, "localhost:1")
    failed = task_view(1, Status.FAILED, 3, "localhost:2")
    base = dict(now=100.0, started_at=90.0, timeout=None, stopping=False, on_failure="stop", max_restarts=3,
                failure_grace=5.0, restarts=0, port_retries=0, queued=0.0, failed_at=None, origin=None,
                tasks=(task, failed))
    return policy.View(**{**base, **changes})


def test_timeout_does_not_count_time_in_a_schedulers_queue():
    running = (task_view(0, Status.RUNNING, None, "localhost:1"),)
    assert policy.decide(view(timeout=5, now=100.0, started_at=90.0, queued=8.0, tasks=running)).action == policy.KEEP
    late = policy.decide(view(timeout=5, now=100.0, started_at=90.0, queued=4.0, tasks=running))
    assert late.action == policy.STOP and late.timed_out
    assert late.reason == "timed out after 5 s of running, after 4 s pending in the scheduler's queue"


def test_a_task_that_exited_0_counts_as_failed_where_a_finding_says_the_others_cannot_go_on():
    done = task_view(1, Status.FINISHED, 0, "localhost:2")
    running = view().tasks[0]
    assert policy.decide(view(tasks=(running, done))).action == policy.KEEP and \
        policy.decide(view(tasks=(running, done))).failed_at is None  # exit 0 alone: no failure
    blamed = dict(tasks=(running, done), failed_by_findings=(1,), origin="worker 1 exited normally before it joined")
    assert policy.decide(view(**blamed)).failed_at == 100.0  # the grace period starts
    stop = policy.decide(view(now=106.0, failed_at=100.0, **blamed))
    assert stop.action == policy.STOP and stop.failed_by_findings == (1,)
    assert stop.reason == "worker 1 exited normally before it joined; stopped the others after 5 s"
    assert policy.decide(view(on_failure="restart", **blamed)).action == policy.RESTART


def test_policy_decides_from_a_view_alone():
    first = policy.decide(view())
    assert first.action == policy.KEEP and first.failed_at == 100.0  # the grace period starts
    later = policy.decide(view(now=106.0, failed_at=100.0))
    assert later.action == policy.STOP and later.reason == "worker 1 failed with exit code 3; stopped the others after 5 s"
    blamed = policy.decide(view(now=106.0, failed_at=100.0, origin="worker 1 raised ValueError"))
    assert blamed.reason.startswith("worker 1 raised ValueError")
    assert policy.decide(view(on_failure="restart")).action == policy.RESTART
    assert policy.decide(view(on_failure="restart", restarts=3)).action == policy.KEEP
    assert policy.decide(view(now=200.0, timeout=50.0)).timed_out
    clashed = task_view(1, Status.FAILED, 1, "localhost:2", bind_failed=True)
    relaunch = policy.decide(view(tasks=(view().tasks[0], clashed)))
    assert relaunch.action == policy.RELAUNCH and "new ports, try 2" in relaunch.why
    own = task_view(1, Status.FAILED, 1, "localhost:2", bind_failed=True, own_tf_config=True)
    assert policy.decide(view(tasks=(view().tasks[0], own))).action != policy.RELAUNCH


def test_the_old_names_of_a_task_still_work(tmp_path):
    run = Run(BEHAVE, n=2, name="old-names", runs_dir=tmp_path / "runs",
              launcher=LocalLauncher(network="host", warm=False))
    assert run.tasks is run.workers and run.worker(1) is run.task("worker:1")
    assert kwnb.Worker is kwnb.Task
    run.workers[1].log_path.write_text("hello from worker 1\n")
    run.workers[1].apply(run.workers[1].observe())  # read by its reader, as a poll does: logs() shows what it kept
    assert run.logs(index=1) == run.logs(1) == run.logs(task="worker:1") == "hello from worker 1"
    assert run.history(index=1) == run.history(1) == [] and run.step_history(index=0) == []
    with pytest.raises(TypeError):
        run.history(0, index=1)
    run.stop()


WRITES_AN_EVENT_FILE = """
from pathlib import Path
Path("logs").mkdir(exist_ok=True)
Path("logs/events.out.tfevents.1.host").write_bytes(b"an event file this kernel cannot read")
"""


def test_event_files_kwnb_cannot_read_become_notes_the_user_sees(tmp_path, monkeypatch):
    for name in [name for name in sys.modules if name.split(".")[0] == "tensorboard"] + ["tensorboard"]:
        monkeypatch.setitem(sys.modules, name, None)  # this kernel has no TensorBoard: imports of it fail
    # nor has it imported the reader before: the process-wide import may have succeeded in an earlier test
    monkeypatch.setattr(tensorboard_import, "_READER", tensorboard_import._ReaderImport())
    (tmp_path / "job.py").write_text(WRITES_AN_EVENT_FILE)
    run = kwnb.launch(tmp_path / "job.py", n=1, cwd=tmp_path, runs_dir=tmp_path / "runs",
                      launcher=LocalLauncher(network="host", warm=False))
    assert run.wait(timeout=60) == [0]
    said = [note for note in run.notes if note.startswith("cannot read TensorBoard event files")]
    assert len(said) == 1 and "pip install tensorboard" in said[0], run.notes
    assert said[0] in run.summary() and said[0] in (run.dir / LOG_NAME).read_text()
    # A file given up on is said once too, however many polls follow.
    from kwnb.engine.readers.tensorboard import TensorBoardScalars

    reader, notes = TensorBoardScalars([tmp_path / "empty"], since=0.0), []
    reader.unreadable[tmp_path / "x.tfevents"] = "DataLossError: truncated record"
    for _ in range(3):
        reader.poll_safely(notes.append)
    assert notes == [f"could not read the TensorBoard event file {tmp_path / 'x.tfevents'}: "
                     "DataLossError: truncated record"]


def test_a_restart_that_cannot_start_a_task_ends_the_run_saying_so(tmp_path, monkeypatch):
    real_popen, started = subprocess.Popen, []

    def popen(argv, *args, **kwargs):  # the cluster's restart cannot start its second task
        if BOOTSTRAP in argv:
            if len(started) == 3:
                raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
            started.append(real_popen(argv, *args, **kwargs))
            return started[-1]
        return real_popen(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    run = kwnb.launch(BEHAVE, n=2, name="restart-fails", args=["--fail-index", "1", "--sleep", "60"],
                      runs_dir=tmp_path / "runs", on_failure="restart", max_restarts=1,
                      launcher=LocalLauncher(network="host", warm=False))
    assert None not in run.wait(timeout=60) and run.done
    assert len(started) == 3 and all(gone(process.pid) for process in started)
    assert run.reason.startswith("could not relaunch the cluster: could not start worker 1:"), run.reason
    assert run.status == "failed"


def test_the_magic_says_a_failed_launch_in_one_line(tmp_path, monkeypatch):
    from IPython import get_ipython
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    real_popen, started = subprocess.Popen, []

    def popen(argv, *args, **kwargs):
        if BOOTSTRAP in argv and started:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        process = real_popen(argv, *args, **kwargs)
        started.extend([process] if BOOTSTRAP in argv else [])
        return process

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(subprocess, "Popen", popen)
    with pytest.raises(UsageError) as raised:
        shell.run_cell_magic("kw_worker", "main.py -n 2 --network host --cold", "import time; time.sleep(60)\n")
    assert str(raised.value) == ("could not start worker 1: [Errno 11] Resource temporarily unavailable; "
                                 "stopped the 1 already started")
    assert len(started) == 1 and gone(started[0].pid)


def poll_fails_for(pid: int, times: float, after: int = 3):
    """LocalProcess.poll that raises OSError(EIO), as a /proc read can, for task `pid` from its `after`-th call
    on, `times` times in a row (float('inf'): every time)."""
    real_poll, calls = LocalProcess.poll, {"seen": 0, "raised": 0}

    def poll(process):
        if process.pid == pid:
            calls["seen"] += 1
            if calls["seen"] > after and calls["raised"] < times:
                calls["raised"] += 1
                raise OSError(errno.EIO, "Input/output error")
        return real_poll(process)
    return poll, calls


def test_a_read_error_once_is_looked_at_again_not_a_reason_to_end_the_run(tmp_path, monkeypatch):
    run = Run(BEHAVE, n=2, name="read-once", args=["--sleep", "2"], runs_dir=tmp_path / "runs",
              launcher=LocalLauncher(network="host", warm=False))
    run.start()
    poll, calls = poll_fails_for(run.workers[1].pid, times=1)
    monkeypatch.setattr(LocalProcess, "poll", poll)
    codes = run.wait(timeout=60)
    assert calls["raised"] == 1, calls
    assert codes == [0, 0] and run.status == Status.FINISHED, (codes, run.reason)
    assert "supervisor failed" not in run.reason


def test_a_task_whose_state_cannot_be_read_is_stopped_with_the_others_when_the_supervisor_fails(tmp_path, monkeypatch):
    run = Run(BEHAVE, n=2, name="read-always", args=["--sleep", "60", "--child", "group"], runs_dir=tmp_path / "runs",
              launcher=LocalLauncher(network="host", warm=False))
    run.start()
    pids = [task.pid for task in run.workers]
    poll, calls = poll_fails_for(pids[1], times=float("inf"))
    monkeypatch.setattr(LocalProcess, "poll", poll)
    run.wait(timeout=60)
    assert run.done and run.status == Status.FAILED, run.status
    assert "supervisor failed (OSError" in run.reason, run.reason
    group = [p.pid for p in psutil.process_iter() if _group_of(p.pid) == pids[1] and not gone(p.pid)]  # its child too
    assert all(gone(pid) for pid in pids) and not group, ([task.status for task in run.workers], group)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# ----- a task's end a restart recovered from (engine/diagnoses/recovery.py) -------------------------------

def killed_then(restarts: int, codes: tuple) -> list[TaskView]:
    """Two workers; worker 1 restarted `restarts` times, their exit codes now `codes`."""
    return [TaskView(p, TaskId("worker", p), p == 0, Status.FINISHED if codes[p] == 0 else
                     Status.FAILED if codes[p] else Status.RUNNING, "training", returncode=codes[p],
                     restarts=restarts, alive=codes[p] is None) for p in (0, 1)]


def test_a_kill_the_run_recovered_from_says_so_and_is_no_longer_a_fault():
    from kwnb.engine.diagnoses.diagnosis import RunView
    from kwnb.engine.records.summary import format_summary
    from kwnb.engine.records.snapshot import RunSnapshot

    def diagnosed(tasks, current=()):  # one pass, as the supervisor makes it (on copies: each result stays as it was)
        current = [d.copy() for d in current]
        view = RunView(tasks=tuple(tasks), name="ft", script="ft.py", diagnoses=tuple(current), stall_after=0,
                       restart_limit=2)
        return diagnose.merge(current, diagnose.findings(view, 100.0), 100.0)[0]

    killed = diagnosed(killed_then(0, (None, -9)))
    assert [(d.kind, d.task, d.attempt) for d in killed] == [("killed", 1, 0)]
    assert killed[0].message.startswith("worker 1 was killed by SIGKILL from outside kwnb")
    restarted = diagnosed(killed_then(1, (None, None)), killed)
    assert [d.message for d in restarted] == ["worker 1 was killed by SIGKILL from outside kwnb, then restarted "
                                              "(restart 1 of 2)"] and not restarted[0].recovered
    # Not the origin of what fails later: that failure is its own.
    assert diagnose.origin(restarted, killed_then(1, (None, None))) is None
    ended = diagnosed(killed_then(1, (0, 0)), restarted)
    assert [d.message for d in ended] == ["worker 1 was killed by SIGKILL from outside kwnb, then recovered "
                                          "(restart 1 of 2)"] and ended[0].recovered
    again = diagnosed(killed_then(1, (None, -9)), restarted)  # the restarted attempt killed too: that kill is said
    assert again[0].message.startswith("worker 1 was killed by SIGKILL from outside kwnb") and \
        "then" not in again[0].message and again[0].attempt == 1
    # The summary lists it apart from what is wrong; the banner does not open in red; no task is marked.
    from kwnb.notebook.overview import diagnoses_html, faults

    summary = format_summary(RunSnapshot(name="ft", dir=Path("ft"), status="finished", done=True,
                                         tasks=tuple(killed_then(1, (0, 0))), diagnoses=tuple(ended)))
    assert "diagnoses:" not in summary and "recovered:\n  - killed: worker 1 was killed" in summary
    assert "#c62828" not in diagnoses_html(ended) and "then recovered" in diagnoses_html(ended)
    assert faults(ended) == [] and "#c62828" in diagnoses_html(killed)
