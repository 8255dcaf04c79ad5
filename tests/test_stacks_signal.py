"""Which live tasks the stacks signal (SIGUSR2) goes to when every live task is silent: never one whose error reached
the script's top level. That task is exiting, its handler may be gone, and the signal would end it (exit -12), told
then as a kill from outside kwnb (seen on the corpus's keras-guide-multi-gpu-tf-mwms under load)."""
from __future__ import annotations

from kwnb.engine.diagnoses.diagnose import wants_stacks
from kwnb.engine.diagnoses.diagnosis import RunView
from kwnb.engine.readers.tf_events import Frame, PythonTraceback
from kwnb.engine.tasks.task import Signals
from kwnb.engine.tasks.view import TaskView
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
