"""Keras 3's output, read as tf-keras' is: real captures (tests/data/keras3/, tests/scripts/keras3_fit.py) of its
bars, which are coloured with ANSI escapes even in a file, on the TensorFlow and the JAX backend.

Expected values are read from the raw bytes with regular expressions written here, never by asking the parser
under test; the screen's lines are what a terminal shows (no escape sequence, each redrawn line once).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from chunking import random_chunks
from kwnb.engine.readers import tf_messages as tf
from kwnb.engine.readers.metrics import MetricsParser
from kwnb.engine.readers.output import TaskOutput, read_kept
from kwnb.engine.readers.tf_events import InputExhausted

DATA = Path(__file__).parent / "data" / "keras3"
BARS = ["tf_verbose1.log", "jax_verbose1.log"]  # verbose=1: a redrawn bar
CAPTURES = [*BARS, "tf_verbose2.log"]  # verbose=2: one line per epoch (tf_ran_out.log: read by its own test)
STEPS, EPOCHS = 12, 3  # keras3_fit.py: 384 samples in batches of 32, 3 epochs; evaluate: 128 in batches of 32
BOLD = r"(?:\x1b\[1m)?"  # verbose=1 draws the step count in bold, verbose=2 plainly
FINAL = re.compile(BOLD + r" ?(\d+)/(\d+)[^\r\n\x08]* - accuracy: ([0-9.]+) - loss: ([0-9.]+)"
                   r"(?: - val_accuracy: ([0-9.]+) - val_loss: ([0-9.]+))? *\n")  # padded where a longer frame was
REDRAWN = re.compile(r"\x1b\[1m *(\d+)/12\x1b\[0m[^\r\n\x08]* - accuracy: ([0-9.]+) - loss: ([0-9.]+) *\x08")


def raw(name: str) -> str:
    return (DATA / name).read_bytes().decode("utf-8")


def expected_epochs_and_evaluation(text: str) -> tuple[list[dict], dict]:
    """The `\\n`-ended lines with values: fit's epochs (with validation values), then evaluate's (without)."""
    found = FINAL.findall(text)
    epochs = [{"epoch": i, "accuracy": float(acc), "loss": float(loss), "val_accuracy": float(vacc),
               "val_loss": float(vloss)} for i, (_, _, acc, loss, vacc, vloss) in enumerate(found) if vloss]
    (step, steps, acc, loss, _, _), = [row for row in found if not row[5]]
    assert step == steps == "4"  # the fixture is what the test thinks it is
    return epochs, {"epoch": EPOCHS - 1, "accuracy": float(acc), "loss": float(loss)}


def expected_steps(text: str) -> list[tuple[int, int, float, float]]:
    """(epoch, global step, accuracy, loss) of each redrawn training bar, then of each epoch's last line."""
    rows = []
    parts = re.split(r"^Epoch (\d+)/\d+\n", text, flags=re.MULTILINE)
    for number, body in zip(parts[1::2], parts[2::2]):
        epoch = int(number) - 1
        body = body[:body.index("val_loss")]  # training's bar only: evaluate's follows the last epoch
        rows += [(epoch, epoch * STEPS + int(step), float(acc), float(loss)) for step, acc, loss in REDRAWN.findall(body)]
        last, = FINAL.findall(body + "val_loss: 0\n")
        rows.append((epoch, (epoch + 1) * STEPS, float(last[2]), float(last[3])))
    return rows


def read(text: str, chunks: list[str] | None = None) -> MetricsParser:
    """The parser as a task's reader feeds it: the log in `chunks` (whole when None), then the task's end."""
    parser = MetricsParser()
    output = TaskOutput("unread.log", sinks=(lambda lines: parser.take(lines.text),))
    for chunk in chunks or [text]:
        output.feed(chunk)
    output.end()
    return parser


@pytest.mark.parametrize("name", CAPTURES)
def test_keras3_epochs_are_read_with_their_validation_values(name):
    text = raw(name)
    epochs, _ = expected_epochs_and_evaluation(text)
    assert len(epochs) == EPOCHS
    parser = read(text)
    assert parser.history() == epochs
    assert parser.total_epochs == EPOCHS and parser.steps_per_epoch == STEPS


@pytest.mark.parametrize("name", BARS)
def test_keras3_step_rows_are_the_redrawn_bars_then_the_epochs_line(name):
    text = raw(name)
    expected = expected_steps(text)
    assert len(expected) > 3 * EPOCHS and all(step % STEPS for _, step, _, _ in expected[:3])
    parser = read(text)
    assert [(r["epoch"], r["step"], r["accuracy"], r["loss"]) for r in parser.steps] == expected


@pytest.mark.parametrize("name", CAPTURES)
def test_keras3_evaluate_is_an_evaluation_not_an_epoch(name):
    """evaluate's bar follows the last epoch's line: its result is kept as such, the epoch keeps its own values,
    and the progress stays at the last training step (before, the label read `step 4/4`, evaluate's)."""
    text = raw(name)
    epochs, evaluation = expected_epochs_and_evaluation(text)
    parser = read(text)
    assert parser.evaluations == [evaluation]
    assert parser.history()[-1] == epochs[-1]
    assert parser.progress() == (1.0, f"epoch {EPOCHS}/{EPOCHS}, step {STEPS}/{STEPS}")
    assert all(row["step"] <= EPOCHS * STEPS for row in parser.steps)


@pytest.mark.parametrize("name", BARS)
def test_keras3_read_in_any_pieces_reads_the_same(name):
    """Reads that cut an escape sequence, a glyph's bar or a value in two read the same rows as the whole log."""
    text = raw(name)
    whole = read(text)
    for seed in range(3):
        cut = read(text, random_chunks(text, seed=seed, largest=40))
        assert (cut.history(), cut.steps, cut.evaluations) == (whole.history(), whole.steps, whole.evaluations)


@pytest.mark.parametrize("name", CAPTURES)
def test_the_screen_shows_keras3_as_a_terminal_does(name, tmp_path):
    """No escape sequence reaches the screen, the kept lines (`Run.logs`) or a sink's lines; each redrawn bar is
    one line, its last frame, as a terminal leaves it."""
    text, kept, handed = raw(name), tmp_path / "task.screen", []
    output = TaskOutput("unread.log", keep=None, kept=kept, sinks=(handed.append,))
    for chunk in random_chunks(text, seed=5, largest=64):
        output.feed(chunk)
    output.end()
    shown = [line for line, _ in read_kept(kept)]
    assert not any("\x1b" in line or "\b" in line or "\r" in line for line in shown)
    assert not any("\x1b" in lines.text for lines in handed)
    assert list(output.tail()[0]) == shown
    epochs, evaluation = expected_epochs_and_evaluation(text)
    bars = [line for line in shown if re.match(r" ?\d+/\d+ ", line)]
    assert len(bars) == EPOCHS + 2  # one line per epoch, evaluate's and predict's
    bar = "━" * 20 + " " if "verbose1" in name else "- "
    for line, epoch in zip(bars, epochs):
        assert line.startswith(f"{STEPS}/{STEPS} {bar}")
        assert line.endswith(f" - accuracy: {epoch['accuracy']:.4f} - loss: {epoch['loss']:.4f} - val_accuracy: "
                             f"{epoch['val_accuracy']:.4f} - val_loss: {epoch['val_loss']:.4f}")
    assert bars[EPOCHS].startswith(f"4/4 {bar}") and bars[EPOCHS].endswith(f" - loss: {evaluation['loss']:.4f}")


def test_keras3_input_that_ran_out_is_a_step_and_its_bar_is_named():
    """tf_ran_out.log: fit(epochs=3, steps_per_epoch=10) on 4 batches. Keras 3 warns, into the bar it is drawing,
    that the input ran out; that line (`4/10 ━━...loss: 0.7759/.../epoch_iterator.py:116: UserWarning: Your input
    ran out of data`) is a step cut by another line, not the epoch's end, which Keras still draws at 10/10. The
    warning names the bar's step, as tf-keras' `4/10 [===>...]` does."""
    text = raw("tf_ran_out.log")
    cut = re.search(r"\x1b\[1m *(\d+)/10\x1b\[0m[^\r\n\x08]* - accuracy: ([0-9.]+) - loss: ([0-9.]+)/\S+ UserWarning: "
                    r"Your input ran out of data", text)
    epoch_lines = re.findall(r"\x1b\[1m10/10\x1b\[0m[^\r\n\x08]* - accuracy: ([0-9.]+) - loss: ([0-9.]+)\n", text)
    assert cut and len(epoch_lines) == EPOCHS
    parser = read(text)
    assert parser.history() == [{"epoch": e, "accuracy": float(acc), "loss": float(loss)}
                                for e, (acc, loss) in enumerate(epoch_lines)]
    assert {"epoch": 0, "step": int(cut[1]), "accuracy": float(cut[2]), "loss": float(cut[3])} in parser.steps
    events = [e for e in tf.scan(text) if isinstance(e, InputExhausted)]
    assert [(e.source, e.step, e.steps) for e in events] == [("keras", int(cut[1]), 10)]


def test_keras3_first_pass_over_data_of_unknown_length_is_no_input_exhausted():
    """tf_unknown_steps.log: fit(epochs=2) on a filtered tf.data dataset (unknown length), not repeated. Keras 3
    draws `12/Unknown`, warns "Your input ran out of data" into that bar when the first pass ends (how it learns
    the epoch's length), draws `12/12` and trains epoch 2 in full: no input ran out, and the cut `12/Unknown` line
    is a step, not the epoch's end (before, input_exhausted said fit had stopped early)."""
    text = raw("tf_unknown_steps.log")
    assert re.search(r" +12/Unknown [^\n]*UserWarning: Your input ran out of data", text)
    epoch_lines = re.findall(r"\x1b\[1m12/12\x1b\[0m[^\r\n\x08]* - accuracy: ([0-9.]+) - loss: ([0-9.]+)\n", text)
    assert len(epoch_lines) == 2
    parser = read(text)
    assert parser.history() == [{"epoch": e, "accuracy": float(acc), "loss": float(loss)}
                                for e, (acc, loss) in enumerate(epoch_lines)]
    assert parser.evaluations == [] and parser.steps_per_epoch == STEPS
    assert [e for e in tf.scan(text) if isinstance(e, InputExhausted)] == []


def test_keras3_fit_of_one_epoch_has_no_header_and_is_read_all_the_same():
    """tf_one_epoch.log: fit(epochs=1), then evaluate. Keras 3 prints no `Epoch 1/1`: its bar is epoch 1's (the
    progress names it, with no total to count against), and evaluate's bar that follows is an evaluation."""
    text = raw("tf_one_epoch.log")
    assert "Epoch" not in text
    epochs, evaluation = expected_epochs_and_evaluation(text)
    assert len(epochs) == 1
    parser = read(text)
    assert parser.history() == epochs
    assert parser.evaluations == [{**evaluation, "epoch": 0}]
    assert parser.progress() == (None, f"epoch 1, step {STEPS}/{STEPS}")


def test_a_loop_s_own_count_lines_are_no_fit_followed_by_evaluate():
    """A custom loop's `step k/N - loss: x` lines, each ended by `\\n`, with no `Epoch` and no bar: no Keras fit,
    so none is taken for an evaluation; each is read as before (the step moves on, the last values stand)."""
    parser = read("step 1/3 - loss: 0.9000\nstep 2/3 - loss: 0.8000\nstep 3/3 - loss: 0.7000\n")
    assert parser.evaluations == [] and parser.step == 3 and parser.epoch is None
    assert parser.history() == [{"epoch": 0, "loss": 0.7}]


def test_a_tf_keras_progbar_of_a_loop_with_no_epoch_line_keeps_being_read():
    """tf.keras.utils.Progbar drawn once an epoch by a custom loop that prints no `Epoch k/N`: each bar is read as
    before (its values replace the last), none taken for an evaluation."""
    bar = "3/3 [==============================] - 0s 2ms/step - loss: {:.4f}\n"
    parser = read(bar.format(0.9) + bar.format(0.8))
    assert parser.evaluations == [] and parser.history() == [{"epoch": 0, "loss": 0.8}]
