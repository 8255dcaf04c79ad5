"""Tasks that save to the same path (issue 39, item 3): under MultiWorkerMirroredStrategy every worker saves, the
chief to the real path and each other worker to a temporary one; given one path, their saves collide at random.
kwnb says so, with the path and the fix: read from real captured logs of both failure shapes (tests/data/tf-2.21/
same-path-*, tests/data/replays/same-path-savedmodel), and, where nothing failed, from the script's literal save
path and the file written there, on real runs (tests/scripts/same_path_checkpoint.py, same_path_save.py right)."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

import kwnb
from kwnb.engine.diagnoses import diagnose, saves
from kwnb.engine.diagnoses.diagnosis import Look, RunView
from kwnb.engine.readers import tf_events
from kwnb.engine.readers.tf_messages import scan
from kwnb.engine.tasks.task import Task
from kwnb.engine.tasks.view import view_of
from kwnb.task.tf_config import TaskId

TESTS = Path(__file__).parent
SCRIPT = TESTS / "scripts" / "same_path_save.py"
SAVE_LINE = 1 + SCRIPT.read_text().splitlines().index('    model.save("saved_model")')
CHECKPOINT = TESTS / "scripts" / "same_path_checkpoint.py"
DATA = TESTS / "data" / "tf-2.21"


def _ended_tasks(logs: list[tuple[str, int]], script: str) -> list[Task]:
    """Tasks that printed the captured logs and ended with the exit codes, each log read by its task's own reader."""
    folder, made = Path(tempfile.mkdtemp()), []
    for position, (log, code) in enumerate(logs):
        (folder / f"{position}.log").write_bytes((DATA / log).read_bytes())
        task = Task(position, TaskId("worker", position), folder / f"{position}.log", folder / f"{position}.jsonl",
                    10, user_files=(script,))
        task.apply(task.observe())
        task.returncode, task.ended_at, task.started_at, task.is_chief = code, 10.0, 0.0, position == 0
        made.append(task)
    return made


def traceback_of(log: str) -> tf_events.PythonTraceback | None:
    found = [e for e in scan((DATA / log).read_text(), ("same_path.py",)) if isinstance(e, tf_events.PythonTraceback)]
    return found[-1] if found else None


@pytest.mark.parametrize("log, short_type", [
    ("same-path-notfound-worker-0.log", "NotFoundError"),  # "...variables_temp/part-...; No such file or directory"
    ("same-path-missing-worker-1.log", "InvalidArgumentError"),  # "allow_missing_files was set to false and ..."
])
def test_a_merge_that_lost_its_temporary_files_names_the_saved_path(log, short_type):
    traceback = traceback_of(log)
    assert traceback.short_type == short_type and "MergeV2Checkpoints" in traceback.message
    assert saves.collided_path(traceback) == "saved_model"


def test_other_errors_are_no_collision():
    for log in ("peer-raises-worker-0.log", "peer-raises-worker-1.log", "chief-only-save-worker-0.log",
                "same-path-notfound-worker-1.log"):  # the last: the task whose save went through
        traceback = traceback_of(log)
        assert traceback is None or saves.collided_path(traceback) is None, log


def test_the_scripts_literal_save_paths_are_found_unless_a_condition_guards_them(tmp_path):
    lines = CHECKPOINT.read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(lines) if "CheckpointManager(" in text)
    assert saves.literal_saves(CHECKPOINT) == (saves.SaveCall("ckpt", line, "tf.train.CheckpointManager"),)
    assert saves.literal_saves(SCRIPT) == ()  # each save under `if how == ...`: a mode the run may not take
    guarded = tmp_path / "guarded.py"
    guarded.write_text('''
SAVED = "exported"
if index == 0:
    model.save("saved_model")  # the chief alone: uneven_steps' mistake, not this one
model.save("a.keras" if is_chief else "tmp/a.keras")
model.save(write_path("b.keras", resolver))
tf.saved_model.save(model, SAVED)
def main():
    model.save_weights(filepath="weights/ckpt")
if __name__ == "__main__":
    main()
    model.save("model.keras")
''')
    assert [(s.path, s.line) for s in saves.literal_saves(guarded)] == [
        ("exported", 7), ("weights/ckpt", 9), ("model.keras", 12)]
    broken = tmp_path / "broken.py"
    broken.write_text("model.save('x'\n")
    assert saves.literal_saves(broken) == () and saves.literal_saves(tmp_path / "missing.py") == ()


def test_a_keras_checkpoint_callbacks_path_is_read_with_its_fields_and_joined_folder(tmp_path):
    """The Keras guide's fault-tolerance section (keras-team/keras guides/distributed_training_with_tensorflow.py),
    as the corpus runs it: the path a folder's name joined with a file name whose {epoch} Keras fills in."""
    guide = tmp_path / "guide.py"
    guide.write_text('''import os
checkpoint_dir = "./ckpt"
def run_training(epochs=1):
    callbacks = [keras.callbacks.ModelCheckpoint(filepath=os.path.join(checkpoint_dir, "ckpt-{epoch}.keras"),
                                                 save_freq="epoch")]
    tf.keras.callbacks.ModelCheckpoint(os.path.join("/abs", "w-{epoch:02d}-{val_loss:.2f}.h5"))
    model.save(os.path.join(checkpoint_dir, name))  # a part that is no literal: no path
    model.save("gs://bucket/saved")
''')
    assert saves.literal_saves(guide) == (
        saves.SaveCall("ckpt/ckpt-{epoch}.keras", 4, "keras.callbacks.ModelCheckpoint", per_worker=True),
        saves.SaveCall("/abs/w-{epoch:02d}-{val_loss:.2f}.h5", 6, "tf.keras.callbacks.ModelCheckpoint",
                       per_worker=True),
        saves.SaveCall("gs://bucket/saved", 8, "model.save"))  # a URL as written, not normalized to gs:/
    call = saves.SaveCall("ckpt [1]/ckpt-{epoch}.keras", 4, "keras.callbacks.ModelCheckpoint", per_worker=True)
    (tmp_path / "ckpt [1]").mkdir()
    (tmp_path / "ckpt [1]" / "other.keras").write_text("x")
    assert saves.written((call,), tmp_path, since=0.0) == {}  # a file the path's fields cannot make
    (tmp_path / "ckpt [1]" / "ckpt-1.keras").write_text("x")
    assert list(saves.written((call,), tmp_path, since=0.0)) == [call.path]
    absolute = saves.SaveCall(str(tmp_path / "ckpt [1]" / "ckpt-{epoch}.keras"), 4, "ModelCheckpoint", per_worker=True)
    assert list(saves.written((absolute,), tmp_path / "elsewhere", since=0.0)) == [absolute.path]


def test_the_files_written_at_a_save_path_since_the_run_began(tmp_path):
    calls = (saves.SaveCall("saved_model", 1, "model.save"), saves.SaveCall("weights/ckpt", 2, "model.save_weights"),
             saves.SaveCall("never", 3, "model.save"))
    (tmp_path / "saved_model" / "variables").mkdir(parents=True)
    (tmp_path / "saved_model" / "variables" / "variables.index").write_text("x")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "ckpt.index").write_text("x")
    written = saves.written(calls, tmp_path, since=0.0)
    assert sorted(written) == ["saved_model", "weights/ckpt"]
    assert saves.written(calls, tmp_path, since=max(written.values()) + 1) == {}  # older than the run


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_collided_save_is_told_with_its_path_and_fix_not_as_a_raw_error(replayed):
    run = replayed["same-path-savedmodel"]
    told = [d for d in run.diagnoses if d.kind == "same_save_path"]
    assert told and not [d for d in run.diagnoses if d.kind == "error"], run.summary()
    said = told[0].message
    assert "save to saved_model failed" in said and f"same_path_save.py line {SAVE_LINE}" in said, said
    assert "saved to the same path at the same time" in said, said
    assert "workertemp_<task index>/saved_model" in said and "MergeV2Checkpoints" in said, said
    assert run.reason.startswith(told[0].cause[:40]), run.reason


def _launch(tmp_path, script, args=""):
    return kwnb.launch(script, n=2, args=args, name=script.stem, runs_dir=tmp_path / "runs", cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_worker_saving_to_one_path_is_told_whether_or_not_it_failed_and_the_right_way_is_not(tmp_path):
    """Real runs: a CheckpointManager every worker gives the directory "ckpt" (in the captures it never failed:
    the files of one task are left), and the tutorial's way (the chief's path, a temporary folder for the other)."""
    (tmp_path / "wrong").mkdir()
    (tmp_path / "right").mkdir()
    wrong, right = _launch(tmp_path / "wrong", CHECKPOINT), _launch(tmp_path / "right", SCRIPT, "right")
    right.wait(600, pictures=True)  # its end drawn before the test folder goes
    wrong.wait(600, pictures=True)
    told = [d for d in wrong.diagnoses if d.kind == "same_save_path"]
    assert told, wrong.summary()
    said = told[0].message
    if wrong.exit_codes == [0, 0]:  # nothing failed: known from the script's path and the files written there
        assert said.startswith("worker 0 and worker 1 both saved to ckpt (same_path_checkpoint.py line "), said
        assert told[0].task is None and "got through" in said
    assert "ckpt" in said and "workertemp_<task index>/ckpt" in said, said
    assert right.exit_codes == [0, 0] and right.diagnoses == [], right.summary()
    assert (tmp_path / "right" / "saved_model" / "saved_model.pb").is_file()


def test_an_hdf5_save_that_found_the_file_locked_by_another_task_is_the_same_path():
    """h5py locks the file it writes: a second worker's `model.save("model.h5")` at the same moment fails with
    "unable to lock file" (errno 11), a real capture of the corpus's report-h5-same-path (ray-project/ray#27938)."""
    made = _ended_tasks([("same-path-notfound-worker-1.log", 0), ("same-path-h5lock-worker-1.log", 1)],
                        "/home/learner/h5_same_path.py")
    save = saves.SaveCall("model.h5", 15, "model.save")
    found = diagnose.findings(RunView(tasks=tuple(view_of(t, 30.0) for t in made), name="main",
                                      script="h5_same_path.py", saves=(save,)), 30.0)
    assert [d.kind for d in found if d.kind in ("same_save_path", "error")] == ["same_save_path"], found
    (told,) = [d for d in found if d.kind == "same_save_path"]
    assert told.task == 1 and "worker 1's save to model.h5 failed" in told.message
    assert "unable to lock file" in told.message and "worker 0 saved to the same path" in told.message
    # without the script's literal save at that line, it is an error like any other
    other = diagnose.findings(RunView(tasks=tuple(view_of(t, 30.0) for t in made), name="main",
                                      script="h5_same_path.py", saves=(saves.SaveCall("model.h5", 99, "model.save"),)),
                              30.0)
    assert "same_save_path" not in [d.kind for d in other] and "error" in [d.kind for d in other]


# The corpus' keras-guide-multi-gpu-tf-checkpoints as it ran once in many: each task, alone, restores the newest file
# of ckpt/ at its second start, and worker 1 listed ckpt-1.keras while worker 0's callback was writing it again.
GUIDE_SCRIPT = ("/tmp/pytest-of-root/pytest-92/corpus0/keras-guide-multi-gpu-tf-checkpoints/program/main.py")
GUIDE_CHECKPOINT = saves.SaveCall("ckpt/ckpt-{epoch}.keras", 219, "keras.callbacks.ModelCheckpoint", per_worker=True)


def test_an_error_that_names_a_path_every_task_saves_to_says_it_may_have_been_another_tasks_file():
    made = _ended_tasks([("shared-checkpoint-read-worker-0.log", 0), ("shared-checkpoint-read-worker-1.log", 1)],
                        GUIDE_SCRIPT)
    views = tuple(view_of(t, 30.0) for t in made)
    found = diagnose.findings(RunView(tasks=views, name="main", script="main.py", saves=(GUIDE_CHECKPOINT,)), 30.0)
    (error,) = [d for d in found if d.kind == "error"]
    assert error.task == 1 and error.cause.startswith("worker 1 failed with ValueError: File not found: "
                                                      "filepath=./ckpt/ckpt-1.keras."), error.cause
    assert ("(main.py line 203, in make_or_restore_model). ckpt/ckpt-{epoch}.keras is a path every task saves to "
            "(main.py line 219, keras.callbacks.ModelCheckpoint), so what worker 1 found there may have been another "
            "task's file, half-written or being replaced: once the tasks train together under "
            "MultiWorkerMirroredStrategy, tf-keras' ModelCheckpoint") in error.message, error.message
    assert "not_distributed" in [d.kind for d in found]  # each trained alone: the cause, said as the run said it
    one = tuple(view_of(t, 30.0) for t in _ended_tasks([("shared-checkpoint-read-worker-1.log", 1)], GUIDE_SCRIPT))
    alone = diagnose.findings(RunView(tasks=one, name="main", script="main.py", saves=(GUIDE_CHECKPOINT,)), 30.0)
    assert "path every task saves to" not in next(d for d in alone if d.kind == "error").message  # one task: its own
    elsewhere = saves.SaveCall("other/ckpt-{epoch}.keras", 219, "keras.callbacks.ModelCheckpoint", per_worker=True)
    other = diagnose.findings(RunView(tasks=views, name="main", script="main.py", saves=(elsewhere,)), 30.0)
    assert "path every task saves to" not in next(d for d in other if d.kind == "error").message


@pytest.mark.parametrize("path, message, named", [
    ("ckpt/ckpt-{epoch}.keras", "File not found: filepath=./ckpt/ckpt-1.keras. Please ensure", True),
    ("ckpt/ckpt-{epoch}.keras", "cannot open /home/me/program/ckpt/ckpt-12.keras", True),
    ("ckpt/ckpt-{epoch}.keras", "File not found: my_ckpt/ckpt-1.keras", False),
    ("ckpt/ckpt-{epoch}.keras", "File not found: ckpt/ckpt-1.h5", False),
    ("weights/ckpt", "Unsuccessful TensorSliceReader constructor: weights/ckpt-3.index", True),
    ("weights/ckpt", "not found: weights/ckpt_old.index", False),
    ("saved_model", "saved_model/variables/variables.index; No such file or directory", True),
    ("saved_model", "saved_models/variables/variables.index; No such file or directory", False),
    ("model.h5", "Unable to open file (name = 'model.h5', errno = 2)", True),
    (".", "File not found: filepath=./ckpt/ckpt-1.keras", False),  # the working folder itself: no one path
])
def test_a_save_path_is_found_in_a_message_as_errors_name_it(path, message, named):
    joined = (view_of(t, 30.0) for t in _ended_tasks([("clean-worker-0.log", 0), ("clean-worker-1.log", 0)], "x.py"))
    save = saves.SaveCall(path, 9, "model.save")
    look = Look(RunView(tasks=tuple(joined), name="main", script="main.py", saves=(save,)), 30.0)
    assert (saves.shared_save_named(message, look) == save) is named
    if named:  # the tutorial's fix: a path of the chief's, a temporary folder for the others
        assert "workertemp_<task index>" in saves.read_while_saved(look.tasks[1], save, look)
