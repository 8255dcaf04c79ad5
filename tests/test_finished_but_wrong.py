"""Training that ran but was wrong (issue 29, items 1 and 2): `not_distributed` and `diverging`, on 2-worker tf-keras
runs (tests/scripts/diagnose_fit.py) replayed from real captures (tests/replay.py; tests/test_replay_drift.py runs
`unset` afresh with TensorFlow) and on values; the curves that show them."""
from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest

from kwnb.engine.diagnoses.diagnose import tf_config_overridden
from kwnb.engine.diagnoses.diagnosis import Look, ProcessFacts, RunView
from kwnb.engine.diagnoses.distribution import not_distributed
from kwnb.engine.diagnoses.divergence import diverging
from kwnb.engine.diagnoses.saves import SaveCall
from kwnb.engine.readers.metrics import MetricsParser, unsummed_note
from kwnb.engine.tasks.task import Signals
from kwnb.engine.tasks.view import TaskView
from kwnb.pictures.plotting import LiveCurves, curves_figure
from kwnb.task.tf_config import TaskId

SCRIPT = Path(__file__).parent / "scripts" / "diagnose_fit.py"
DELETE_LINE = 1 + next(i for i, line in enumerate(SCRIPT.read_text().splitlines()) if "del os.environ" in line)


MODES = ("unset", "noscope", "diverge")


@pytest.fixture
def runs(replayed):
    """The three wrong runs (diagnose_fit.py MODE, stall_after=240), replayed from their captures (tests/conftest.py)."""
    return {mode: replayed[mode] for mode in MODES}


def kinds(run):
    return sorted((d.kind, d.task) for d in run.diagnoses)


# ----- runs replayed from real ones -------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_script_that_deletes_tf_config_is_told_with_its_line(runs):
    run = runs["unset"]
    assert run.wait(0) == [0, 0], run.summary()  # it "finishes": each task trained alone
    assert [kind for kind, _ in kinds(run)] == ["not_distributed"], run.summary()
    said = run.diagnoses[0].message
    assert f"deletes TF_CONFIG (diagnose_fit.py line {DELETE_LINE})" in said and "trained alone" in said, said


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_model_built_outside_the_strategy_scope_is_told_and_its_steps_are_not_halved(runs):
    run = runs["noscope"]
    assert run.wait(0) == [0, 0], run.summary()
    assert [kind for kind, _ in kinds(run)] == ["not_distributed"], run.summary()
    assert "outside strategy.scope()" in run.diagnoses[0].message
    chief = run.workers[0].metrics
    assert chief.replicas_summed is False
    first_step = chief.steps[0]  # step 1 of epoch 1 as printed: the loss of one batch, near the epoch's
    assert first_step["loss"] > 0.7 * chief.history()[0]["loss"], (first_step, chief.history())
    # Told (the epochs showed the values unsummed), not guessed: no note that kwnb could not tell.
    assert not any(note.startswith("per-step curves are drawn as printed") for note in run.notes), run.notes


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_runaway_learning_rate_is_told_with_the_epoch_and_the_values(runs):
    run = runs["diverge"]
    assert run.wait(0) == [0, 0], run.summary()
    # Told on the task whose rise kwnb read first: both print the same values within a poll of each other.
    assert kinds(run) in ([("diverging", 0)], [("diverging", 1)]), run.summary()
    said = run.diagnoses[0].message
    assert said.startswith(f"worker {run.diagnoses[0].task}'s loss grew from"), said
    assert "loss grew from" in said and "epoch 1" in said and "learning rate" in said, said
    assert run.workers[0].metrics.replicas_summed is True  # a clean distributed run's steps are still divided


# ----- values --------------------------------------------------------------------------------------------
def look(tasks) -> Look:
    """One diagnosis pass over `tasks` as every kind's function reads it (engine/diagnoses/diagnosis.py)."""
    return Look(RunView(tasks=tuple(tasks), name="main", script="main.py"), 0.0)


def view(position, epochs=(), steps=(), connected=True, runtime_lines=5, record=None) -> TaskView:
    signals = Signals()
    signals.connected_at = 1.0 if connected else None
    signals.tf_config_set = record
    return TaskView(position=position, id=TaskId("worker", position), is_chief=position == 0, status="finished",
                    phase="finished", returncode=0, epochs=tuple(epochs), steps=tuple(steps), signals=signals,
                    runtime_lines=runtime_lines)


def epochs(*losses):
    return [{"epoch": i, "loss": loss, "accuracy": 0.5} for i, loss in enumerate(losses)]


def test_equal_epoch_losses_are_synchronous_training_and_different_ones_are_not():
    same = [view(0, epochs(0.7040, 0.7134)), view(1, epochs(0.7040, 0.7134))]
    assert not_distributed(look(same)) is None
    found = not_distributed(look([view(0, epochs(0.664, 0.6714)), view(1, epochs(0.7003, 0.6977))]))
    assert found.kind == "not_distributed" and "epoch 1: 0.664 on worker 0, 0.7003 on worker 1" in found.message


def test_copies_whose_losses_agree_by_chance_are_told_by_their_accuracy_but_not_by_a_callbacks_value():
    """The corpus' save-and-load tutorial (its model restored outside the scope), as one run of it printed."""
    def rows(loss, accuracy, **more):
        return [{"epoch": 0, "loss": loss, "sparse_categorical_accuracy": accuracy, **more}]

    found = not_distributed(look([view(0, rows(0.7145, 0.8115)), view(1, rows(0.7142, 0.8164))]))
    assert found.kind == "not_distributed"
    assert "epoch sparse_categorical_accuracy differ (epoch 1: 0.8115 on worker 0, 0.8164" in found.message
    timed = [view(0, rows(0.7145, 0.8115, seconds=3.1)), view(1, rows(0.7145, 0.8115, seconds=3.4))]
    assert not_distributed(look(timed)) is None  # a value a callback adds may differ between tasks trained together
    told = not_distributed(look([view(0, rows(0.70, 0.81)), view(1, rows(0.66, 0.85))]))
    assert "epoch loss differ" in told.message  # the loss first, where it differs


def test_a_loss_that_became_nan_on_every_worker_is_not_told_as_not_distributed():
    """NaN is not equal to itself: notebook 06's NaN run (inputs 255 times too large) read as not distributed."""
    nan, inf = float("nan"), float("inf")
    assert not_distributed(look([view(0, epochs(nan, nan)), view(1, epochs(nan, nan))])) is None
    assert not_distributed(look([view(0, epochs(inf, nan)), view(1, epochs(nan, inf))])) is None


def test_no_join_while_epochs_advanced_is_told_but_not_for_a_script_without_tensorflow():
    alone = [view(p, epochs(0.7, 0.6), connected=False) for p in (0, 1)]
    assert "no task joined a cluster" in not_distributed(look(alone)).message
    plain = [view(p, epochs(0.7, 0.6), connected=False, runtime_lines=0) for p in (0, 1)]  # kwnb.report, no TF
    assert not_distributed(look(plain)) is None


def test_tasks_that_trained_alone_and_saved_to_one_path_are_told_so_once_the_file_is_there():
    """The Keras guide's fault-tolerance section in the corpus: each task, training alone, wrote ckpt/ckpt-1.keras.
    Said once the tasks have ended and a file is at the path (saves.written), in the words said during the run."""
    checkpoint = SaveCall("ckpt/ckpt-{epoch}.keras", 60, "keras.callbacks.ModelCheckpoint", per_worker=True)
    alone = [view(p, epochs(0.7, 0.6), connected=False) for p in (0, 1)]
    during = not_distributed(Look(RunView(tasks=tuple(alone), name="main", script="main.py", saves=(checkpoint,)), 0.0))
    assert "Each task also saved" not in during.message  # the file is not known yet
    facts = ProcessFacts(written={checkpoint.path: 5.0})
    ended = RunView(tasks=tuple(alone), name="main", script="main.py", saves=(checkpoint,), diagnoses=(during,))
    told = not_distributed(Look(ended, 9.0, facts))
    assert told.message.startswith(during.message) and told.message.count("Each task also saved") == 1
    assert ("Each task also saved to the same path, ckpt/ckpt-{epoch}.keras (main.py line 60, "
            "keras.callbacks.ModelCheckpoint), so it holds whichever task's files came last; trained together under "
            "MultiWorkerMirroredStrategy, tf-keras' ModelCheckpoint writes the other workers'") in told.message
    again = RunView(tasks=tuple(alone), name="main", script="main.py", saves=(checkpoint,), diagnoses=(told,))
    assert not_distributed(Look(again, 10.0, facts)).message == told.message  # said once
    saved = SaveCall("saved_model", 9, "model.save")
    with_save = RunView(tasks=tuple(alone), name="main", script="main.py", saves=(saved,))
    said = not_distributed(Look(with_save, 9.0, ProcessFacts(written={"saved_model": 5.0}))).message
    assert "Once they train together: Every worker must save" in said and "workertemp_<task index>/saved_model" in said
    joined = [view(0, epochs(0.66, 0.67)), view(1, epochs(0.70, 0.69))]  # a model outside the scope, servers started:
    for task in joined:  # their shared save is same_save_path's to tell
        task.signals.server_at = 1.0
    outside = Look(RunView(tasks=tuple(joined), name="main", script="main.py", saves=(saved,)), 9.0,
                   ProcessFacts(written={"saved_model": 5.0}))
    said = not_distributed(outside).message
    assert "differ" in said and "Each task also saved" not in said


def test_tf_config_deleted_after_the_task_joined_did_no_harm():
    late = {"tf_config": None, "deleted": True, "time": 5.0, "file": "/x/main.py", "line": 40}
    tasks = [view(0, epochs(0.7), record=late), view(1, epochs(0.7))]
    assert not_distributed(look(tasks)) is None
    early = dict(late, time=0.5)
    found = not_distributed(look([view(0, epochs(0.7), record=early), view(1, epochs(0.7))]))
    assert "deletes TF_CONFIG (main.py line 40)" in found.message


def test_a_tf_config_the_script_sets_is_told_with_its_line_and_a_deleted_one_is_not_an_override():
    record = {"tf_config": '{"cluster": {"worker": ["localhost:1"]}}', "deleted": False, "file": "/x/main.py",
              "line": 7}
    said = tf_config_overridden(view(0, record=record), look([])).message
    assert "sets its own TF_CONFIG (localhost:1) (main.py line 7), so" in said, said
    assert tf_config_overridden(view(0, record={"tf_config": None, "deleted": True, "line": 7}), look([])) is None


def test_a_hundredfold_rise_over_the_best_loss_is_diverging_and_a_noisy_clean_fit_is_not():
    clean = [view(0, epochs(0.74, 0.70, 0.71, 0.69)), view(1, epochs(0.74, 0.70, 0.71, 0.69))]
    assert diverging(look(clean)) is None
    steps = [{"epoch": 0, "step": 1, "loss": 0.345}, {"epoch": 1, "step": 14, "loss": 2100.0}]
    chief = dataclasses.replace(view(0, epochs(3928.7, 273.7, 254.8), steps=steps), steps_per_epoch=10)
    found = diverging(look([chief, view(1)]))
    assert found.kind == "diverging" and found.task == 0
    assert "from 0.345 (epoch 1, step 1/10) to 2.1e+03 (epoch 2, step 4/10)" in found.message, found.message
    rise = diverging(look([view(0, epochs(0.69, 5e10, 450.0)), view(1)]))
    assert "from 0.69 (epoch 1) to 5e+10 (epoch 2)" in rise.message and "last value was 450" in rise.message


def bar(step, steps, loss, accuracy, end="\r"):
    """A tf-keras bar line: redrawn with an ETA (even at the last step), the epoch's line with the time per step."""
    timing = "ETA: 0s" if end == "\r" else "1s 10ms/step"
    return f"{step}/{steps} [====] - {timing} - loss: {loss:.4f} - accuracy: {accuracy:.4f}{end}"


def test_step_values_are_divided_only_once_an_epoch_shows_they_were_summed():
    summed = MetricsParser(step_scale=0.5)
    summed.feed("Epoch 1/2\n" + bar(1, 4, 1.40, 1.0) + bar(3, 4, 1.38, 1.1))
    assert summed.steps[0]["loss"] == 1.40  # not yet told: as printed
    summed.feed(bar(4, 4, 0.69, 0.55, end="\n"))
    assert summed.replicas_summed is True and summed.steps[0]["loss"] == pytest.approx(0.70)
    alone = MetricsParser(step_scale=0.5)
    alone.feed("Epoch 1/2\n" + bar(1, 4, 0.70, 0.5) + bar(3, 4, 0.69, 0.55) + bar(4, 4, 0.69, 0.55, end="\n"))
    assert alone.replicas_summed is False and alone.steps[0]["loss"] == 0.70
    # A note only where kwnb could not tell: seen summed, or seen not summed, is no guess either way.
    assert unsummed_note([alone]) == "" and unsummed_note([summed]) == ""
    untold = MetricsParser(step_scale=0.5)  # stopped before any epoch's end
    untold.feed("Epoch 1/2\n" + bar(1, 4, 1.40, 1.0) + bar(3, 4, 1.38, 1.1))
    assert untold.replicas_summed is None and "did not divide them" in unsummed_note([alone, untold])
    validated = MetricsParser(step_scale=0.5)  # the epoch line's val_ values are not on the bar: judged on the rest
    validated.feed("Epoch 1/2\n" + bar(3, 4, 1.38, 1.1) + bar(4, 4, 0.69, 0.55, end="")
                   + " - val_accuracy: 0.6000 - val_loss: 0.6800\n")
    assert validated.replicas_summed is True


def test_curves_spanning_three_orders_of_magnitude_get_a_log_axis_live_and_saved():
    wild = {"run": {"epochs": epochs(0.69, 5e10, 450.0)}}
    tame = {"run": {"epochs": epochs(0.74, 0.70, 0.69)}}
    assert curves_figure(wild).axes[0].get_yscale() == "log"
    assert curves_figure(tame).axes[0].get_yscale() == "linear"
    live = LiveCurves()
    live.png(tame)
    assert live._figure.axes[0].get_yscale() == "linear"
    live.png(wild)  # the same lines, new data: the figure is kept and its axis changes
    assert live._figure.axes[0].get_yscale() == "log"


def test_epochs_are_compared_once_the_tasks_have_ended_not_while_a_second_fit_replaces_them():
    """A distributed model fitted twice: the first task to end the second fit's epoch 1 holds its new row while
    the other still holds the first fit's; live, that read as 'the tasks' epoch loss differ' (the corpus'
    tfdocs-save-and-load-mwms: 1.975 on worker 0 against 0.6533 on worker 1)."""
    first_fit, second_fit = epochs(1.9749, 1.1670), epochs(0.6502, 1.1670)
    mid_way = [dataclasses.replace(view(0, second_fit), alive=True), dataclasses.replace(view(1, first_fit), alive=True)]
    assert not_distributed(look(mid_way)) is None
    assert not_distributed(look([view(0, second_fit), view(1, second_fit)])) is None  # ended: the same rows
    assert not_distributed(look([view(0, second_fit), view(1, first_fit)])).kind == "not_distributed"
