"""Which live tasks the stacks signal (SIGUSR2) goes to when every live task is silent: never one whose error reached
the script's top level. That task is exiting, its handler may be gone, and the signal would end it (exit -12), told
then as a kill from outside kwnb (seen on the corpus's keras-guide-multi-gpu-tf-mwms under load). And when: once
for a stall, again every --stall-after seconds while the stall told names no culprit."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from kwnb.backends.base import BOOTSTRAP
from kwnb.engine.diagnoses.diagnose import findings
from kwnb.engine.diagnoses.stall import wants_stacks
from kwnb.engine.diagnoses.diagnosis import Diagnosis, ProcessFacts, RunView
from kwnb.engine.readers.tf_events import Frame, PythonTraceback
from kwnb.engine.tasks.task import Signals
from kwnb.engine.tasks.view import TaskView
from kwnb.task.runfolder import POSITION_ENV, RUN_DIR_ENV, STACKS_SIGNAL_NAME
from kwnb.task.tf_config import TaskId


def silent(position: int, traceback: PythonTraceback | None = None) -> TaskView:
    signals = Signals()
    signals.progress_at = 0.0
    if traceback is not None:
        signals.traceback = (50.0, traceback)
    return TaskView(position=position, id=TaskId("worker", position), is_chief=position == 0, status="running",
                    phase="training", alive=True, started_at=0.0, signals=signals)


def raised(function: str) -> PythonTraceback:
    frame = Frame("/job/main.py", 12, function)
    return PythonTraceback(lines=("ValueError: bad",), exc_type="ValueError", message="bad", frames=(frame,),
                           user_frame=frame)


def test_a_task_exiting_with_its_uncaught_error_gets_no_stacks_signal():
    view = RunView(tasks=(silent(0, raised("<module>")), silent(1)), name="main", script="main.py", stall_after=60)
    assert wants_stacks(view, 100.0) == [1]


def test_a_caught_error_leaves_the_task_asked_for_its_stacks():
    view = RunView(tasks=(silent(0, raised("train_step")), silent(1)), name="main", script="main.py", stall_after=60)
    assert wants_stacks(view, 100.0) == [0, 1]


def dump(*innermost: str) -> str:
    """A faulthandler dump whose main thread's innermost frames are `innermost`, innermost first."""
    frames = "".join(f'  File "{f}", line 5 in on_batch_end\n' for f in innermost)
    return f'Current thread 0x00007f00 (most recent call first):\n{frames}  File "/job/main.py", line 9 in <module>\n'


IN_FIT = dump("/venv/site-packages/tensorflow/python/eager/execute.py", "/venv/site-packages/tf_keras/src/engine/training.py")
IN_CALLBACK = dump("/job/main.py", "/venv/site-packages/tf_keras/src/callbacks.py")


def stalled_view(standing: Diagnosis, stacks_at: float) -> RunView:
    return RunView(tasks=(silent(0), silent(1)), name="main", script="main.py", user_files=("/job/main.py",),
                   stall_after=8, diagnoses=(standing,), stacks_at=stacks_at)


def test_a_stall_with_no_culprit_is_looked_at_again_after_stall_after_seconds():
    """Under load a first step's tracing outlasted an 8 s --stall-after: the first look found both tasks inside fit,
    and a stall told so stayed so after worker 1 went on into the callback that blocks."""
    no_culprit = Diagnosis("stalled", None, "no task has made progress for 8 s: ...", since=100.0)
    assert wants_stacks(stalled_view(no_culprit, stacks_at=100.0), 104.0) == []  # looked at 4 s ago
    assert wants_stacks(stalled_view(no_culprit, stacks_at=100.0), 108.5) == [0, 1]
    named = Diagnosis("stalled", 1, "worker 1 in main.py line 5 ...", since=100.0)
    assert wants_stacks(stalled_view(named, stacks_at=100.0), 200.0) == []  # a culprit named stays as told

    view = stalled_view(no_culprit, stacks_at=100.0)
    assert [d.task for d in findings(view, 108.5, ProcessFacts(stacks={0: IN_FIT, 1: IN_FIT})) if d.kind == "stalled"] \
        == [None]
    again = findings(view, 108.5, ProcessFacts(stacks={0: IN_FIT, 1: IN_CALLBACK}))
    assert [(d.kind, d.task) for d in again] == [("stalled", 1)], again
    assert again[0].message.startswith("worker 1 in main.py line 5, in on_batch_end: it is blocked in its own code")
    assert [d.task for d in findings(view, 108.5) if d.kind == "stalled"] == [None]  # no new stacks: as it was told


def test_a_task_asked_for_its_stacks_while_it_exits_ends_with_its_own_code(tmp_path):
    """Python's shutdown removes faulthandler's handler for the stacks signal and puts back what it replaced: the
    default action, to end the process, until the bootstrap made that "ignored". A chief asked for its stacks while it
    waited in TensorFlow's shutdown ended -12 (tests/test_warm_cgroup.py's re-run under one CPU). Each task here is
    sent the signal every 0.2 ms from its last line, through its last 50 ms and its exit, until it is gone: before
    the change, 40 tasks of 40 ended -12. A child the task starts still gets the signal's default action (0)."""
    script = tmp_path / "main.py"
    script.write_text("import subprocess, sys, time\n"
                      "child = subprocess.run([sys.executable, '-c', 'import signal; "
                      f"print(int(signal.getsignal(signal.{STACKS_SIGNAL_NAME})))'], capture_output=True, text=True)\n"
                      "print('last line', child.stdout.strip(), flush=True)\ntime.sleep(0.05)\n")
    env = {**os.environ, RUN_DIR_ENV: str(tmp_path), POSITION_ENV: "0"}
    codes = []
    for _ in range(10):
        task = subprocess.Popen([sys.executable, BOOTSTRAP, str(script)], env=env, stdout=subprocess.PIPE)
        assert task.stdout.readline() == b"last line 0\n"  # the handler is in place from before the script's first line
        while task.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(task.pid, getattr(signal, STACKS_SIGNAL_NAME))
            time.sleep(0.0002)
        codes.append(task.wait())
    assert codes == [0] * 10
    # the signals that came before the end were answered
    assert "most recent call first" in (tmp_path / "stacks-0.txt").read_text()
