"""kwnb.metrics: training curves read from real tf-keras output, custom-loop lines and kwnb.report rows.

Expected values are read from the raw fixture bytes with simple regular expressions written here,
never by asking the parser under test.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

import kwnb
from kwnb.engine.readers import metrics as metrics_module
from kwnb.engine.readers.follow import FileFollower
from chunking import random_chunks
from kwnb.engine.readers.metrics import MetricsParser, parse_metrics
from kwnb.task.runfolder import RunFolder

DATA = Path(__file__).parent / "data"
FIXTURES = ["keras_verbose1.log", "keras_verbose2.log"]
STEPS_PER_EPOCH = 20  # tests/scripts/keras_fit.py: steps_per_epoch=20, epochs=3


def raw(name: str) -> str:
    return (DATA / name).read_bytes().decode("utf-8")


def expected_epochs(text: str) -> list[dict]:
    """The `\\n`-terminated progress lines: what Keras prints once an epoch is done."""
    found = re.findall(r"loss: ([0-9.]+) - accuracy: ([0-9.]+)[^\r\x08\n]*\n", text)
    return [{"epoch": i, "loss": float(loss), "accuracy": float(acc)} for i, (loss, acc) in enumerate(found)]


def expected_steps(text: str) -> list[tuple[int, int, float, float]]:
    """(epoch, step, loss, accuracy) of every redrawn (backspace-terminated) progress line, as printed."""
    rows = []
    parts = re.split(r"^Epoch (\d+)/\d+\n", text, flags=re.MULTILINE)
    for number, body in zip(parts[1::2], parts[2::2]):
        for step, loss, acc in re.findall(r"(\d+)/\d+ \[[=>.]*\] - ETA: \S+ - loss: ([0-9.]+) - accuracy: ([0-9.]+)\x08",
                                          body):
            rows.append((int(number) - 1, int(step), float(loss), float(acc)))
    return rows


def parsed(*pieces: str, step_scale: float = 1.0) -> MetricsParser:
    parser = MetricsParser(step_scale=step_scale)
    for piece in pieces:
        parser.feed(piece)
    return parser


# ----- real tf-keras logs -------------------------------------------------------------------------

@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_epochs_match_the_final_epoch_lines(name):
    text = raw(name)
    expected = expected_epochs(text)
    assert [row["epoch"] for row in expected] == [0, 1, 2]  # the fixture is what the test thinks it is
    parser = parsed(text)
    assert parser.history() == expected
    assert parser.total_epochs == 3
    assert parser.steps_per_epoch == STEPS_PER_EPOCH
    assert parser.progress() == (1.0, f"epoch 3/3, step {STEPS_PER_EPOCH}/{STEPS_PER_EPOCH}")


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fixture_parses_the_same_in_random_chunks(name, seed):
    text = raw(name)
    whole = parsed(text, step_scale=0.5)
    chunked = parsed(*random_chunks(text, seed), step_scale=0.5)
    assert chunked.history() == whole.history() == expected_epochs(text)
    assert chunked.steps == whole.steps
    assert (chunked.epoch, chunked.step, chunked.steps_per_epoch) == (whole.epoch, whole.step, whole.steps_per_epoch)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_parses_the_same_byte_by_byte(name):
    text = raw(name)
    whole = parsed(text, step_scale=0.5)
    by_byte = parsed(*text, step_scale=0.5)
    assert by_byte.history() == whole.history()
    assert by_byte.steps == whole.steps


def test_verbose1_step_rows_are_the_redrawn_lines_scaled_then_the_epoch_line():
    """Redrawn lines are summed over replicas (scaled by 1/N); each epoch's step rows then end with
    the epoch line itself, whose values Keras has already reduced (not scaled)."""
    text = raw("keras_verbose1.log")
    expected = expected_steps(text)
    assert len(expected) > 3
    epochs = expected_epochs(text)
    want = []
    for epoch in epochs:
        want += [(e, e * STEPS_PER_EPOCH + s, loss * 0.5, acc * 0.5) for e, s, loss, acc in expected if e == epoch["epoch"]]
        want.append((epoch["epoch"], (epoch["epoch"] + 1) * STEPS_PER_EPOCH, epoch["loss"], epoch["accuracy"]))
    parser = parsed(text, step_scale=0.5)
    assert [(r["epoch"], r["step"]) for r in parser.steps] == [(e, s) for e, s, _, _ in want]
    got = [value for r in parser.steps for value in (r["loss"], r["accuracy"])]
    assert got == pytest.approx([value for _, _, loss, acc in want for value in (loss, acc)])


def test_step_scale_makes_the_last_step_agree_with_the_epoch():
    """tf-keras sums per-step logs over the 2 replicas; 1/N brings them back to the epoch's scale.

    Where the fixture caught the bar at step 20/20 before the epoch line, the scaled step row and
    the epoch row describe the same state.
    """
    text = raw("keras_verbose1.log")
    epochs = expected_epochs(text)
    parser = parsed(text, step_scale=0.5)
    redrawn_at_end = {(e, s) for e, s, _, _ in expected_steps(text) if s == STEPS_PER_EPOCH}
    last_of_epoch = {r["epoch"]: i for i, r in enumerate(parser.steps)}  # the epoch line itself, unscaled
    at_end = [r for i, r in enumerate(parser.steps)
              if (r["epoch"], r["step"] - r["epoch"] * STEPS_PER_EPOCH) in redrawn_at_end and i != last_of_epoch[r["epoch"]]]
    assert at_end, "the fixture should contain a redrawn 20/20 line"
    for row in at_end:
        assert row["loss"] == pytest.approx(epochs[row["epoch"]]["loss"], abs=1e-3)
        assert row["accuracy"] == pytest.approx(epochs[row["epoch"]]["accuracy"], abs=1e-3)
        raw_row = parsed(text).steps[parser.steps.index(row)]
        assert raw_row["loss"] > 1.5 * epochs[row["epoch"]]["loss"]  # unscaled, it is about twice


def test_every_epochs_step_rows_reach_the_epochs_last_step():
    """The per-step curve should end where the epoch ends.

    tf-keras throttles redraws to one per 0.05 s, so the last redrawn line of an epoch is often
    not step 20/20 (in this fixture: 18/20 and 17/20 for epochs 1 and 2). The last step is only
    in the `\\n`-terminated epoch line, which the parser records as the epoch row alone; so the step
    curve stops short and its last point does not meet the epoch point.
    """
    text = raw("keras_verbose1.log")
    epochs = expected_epochs(text)
    parser = parsed(text, step_scale=0.5)
    for epoch in epochs:
        rows = [r for r in parser.steps if r["epoch"] == epoch["epoch"]]
        assert rows, f"no step rows for epoch {epoch['epoch']}"
        last = rows[-1]
        assert last["step"] == (epoch["epoch"] + 1) * STEPS_PER_EPOCH, f"epoch {epoch['epoch']}: {last}"
        assert last["loss"] == pytest.approx(epoch["loss"], abs=1e-3)


def test_verbose2_has_epoch_rows_only():
    parser = parsed(raw("keras_verbose2.log"), step_scale=0.5)
    assert parser.steps == []
    assert len(parser.history()) == 3


def test_tensorflow_startup_lines_produce_no_rows():
    """The fixture's TF start-up noise, "Waiting for 1/2 tasks to connect." included."""
    text = raw("keras_verbose1.log")
    startup = text[: text.index("Epoch 1/")]
    assert "Waiting for 1/2 tasks to connect." in startup
    parser = parsed(startup)
    assert parser.history() == [] and parser.steps == []
    assert parser.epoch is None and parser.steps_per_epoch is None
    assert parser.progress() == (None, "")


def test_waiting_lines_between_progress_do_not_disturb_it():
    parser = parsed("Epoch 1/2\n", "Waiting for 1/2 tasks to connect.\n",
                    " 3/10 [==>.......] - ETA: 1s - loss: 0.9000\x08\x08\r",
                    "Waiting for 0/2 tasks to connect.\n")
    assert parser.history() == []
    assert [(r["step"], r["loss"]) for r in parser.steps] == [(3, 0.9)]
    assert parser.steps_per_epoch == 10 and parser.step == 3


@pytest.mark.parametrize("runtime_line", [
    "W0000 00:00:1795533745.292304   12375 preemption_notifier.cc:90] Sigterm received.",  # TF 2.21 (absl)
    "2024-01-02 03:04:05.123456: I tensorflow/core/x.cc:1] the format of TF 2.15 and before",
])
def test_a_runtime_line_written_into_a_bar_being_drawn_is_no_epoch(runtime_line):
    """A stopped task's bar, interrupted by TensorFlow's C++ logging (found by the diagnoses' review: the
    summary read '1 epochs, last: loss 0  preemption_notifier.cc 90')."""
    parser = parsed("Epoch 1/3\n", "\r1/5 [=====>....] - ETA: 3s - loss: 0.6931" + runtime_line + "\n")
    assert parser.history() == []
    assert [(r["step"], r["loss"]) for r in parser.steps] == [(1, 0.6931)]


# ----- custom training loops ----------------------------------------------------------------------

def test_custom_loop_lines():
    lines = [f"Epoch: {e}, accuracy: {a:f}, train_loss: {l:f}.\n" for e, a, l in
             [(0, 0.83, 0.52), (1, 0.9, 0.31), (2, 0.95, 0.125)]]
    parser = parsed(*lines)
    assert parser.history() == [
        {"epoch": 0, "accuracy": 0.83, "train_loss": 0.52},
        {"epoch": 1, "accuracy": 0.9, "train_loss": 0.31},
        {"epoch": 2, "accuracy": 0.95, "train_loss": 0.125},
    ]
    assert parser.steps == []


@pytest.mark.parametrize("line, expected", [
    ("Epoch 4: loss=0.25 accuracy=0.5\n", {"epoch": 4, "loss": 0.25, "accuracy": 0.5}),
    ("Epoch: 1, loss: 1.5e-03, val_loss: nan\n", {"epoch": 1, "loss": 0.0015, "val_loss": math.nan}),
    ("Epoch 0, loss: -0.5\n", {"epoch": 0, "loss": -0.5}),
])
def test_custom_loop_variants(line, expected):
    row = parsed(line).history()[0]
    assert row.keys() == expected.keys()
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, nan_ok=True)


def test_epoch_line_without_metrics_is_not_a_row():
    assert parsed("Epoch: 3, starting\n").history() == []


def test_custom_loop_line_after_a_cleared_progress_bar_does_not_depend_on_chunking():
    """tqdm(leave=False) clears its bar with `\\r`, spaces, `\\r` and the script then prints its line.

    The epoch row must be found whether the kernel's read splits the output at that `\\r` or not.
    """
    text = (" 50%|#####     | 1/2 [00:00<00:00]\r100%|##########| 2/2 [00:00<00:00]\r" + " " * 36 + "\r"
            "Epoch: 0, accuracy: 0.830000, train_loss: 0.520000.\n")
    expected = [{"epoch": 0, "accuracy": 0.83, "train_loss": 0.52}]
    cut = text.rindex("\r") + 1
    assert parsed(text[:cut], text[cut:]).history() == expected
    assert parsed(text).history() == expected


def test_restarted_worker_reprinting_an_epoch_replaces_it():
    parser = parsed("Epoch: 0, loss: 0.9\n", "Epoch: 1, loss: 0.8\n", "Epoch: 1, loss: 0.7\n")
    assert [r["loss"] for r in parser.history()] == [0.9, 0.7]


# ----- kwnb.report rows ---------------------------------------------------------------------------

def test_report_row_wins_over_an_earlier_parsed_row():
    parser = parsed("Epoch: 0, loss: 9.0, accuracy: 0.5\n")
    parser.add_reported({"epoch": 0, "step": None, "loss": 1.0})
    assert parser.history() == [{"epoch": 0, "loss": 1.0, "accuracy": 0.5}]


def test_report_row_wins_over_a_later_parsed_row():
    """`kwnb.report` rows are explicit, so they win whatever order they are read in.

    The supervisor reads the log and the report file separately, so a row reported before the
    worker prints its epoch line can easily be read first.
    """
    parser = MetricsParser()
    parser.add_reported({"epoch": 0, "step": None, "loss": 1.0})
    parser.feed("Epoch: 0, loss: 9.0, accuracy: 0.5\n")
    assert parser.history()[0]["loss"] == 1.0


def without_time(rows: list[dict]) -> list[dict]:
    """kwnb.report stamps each row with the wall time; that is not a training metric."""
    return [{k: v for k, v in row.items() if k != "time"} for row in rows]


def report_rows(monkeypatch, tmp_path, calls) -> MetricsParser:
    """Rows written by the real kwnb.report (as a worker would) and read back as the Run does."""
    monkeypatch.setenv("KWNB_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("KWNB_WORKER", "1")
    for kwargs in calls:
        kwnb.report(**kwargs)
    parser = MetricsParser(step_scale=0.5)
    parser.feed_report_lines(FileFollower(RunFolder(tmp_path).metrics(1)).read_new())
    return parser


def test_reported_rows_become_history_and_steps(monkeypatch, tmp_path):
    np = pytest.importorskip("numpy")
    parser = report_rows(monkeypatch, tmp_path, [
        dict(epoch=0, step=3, loss=np.float32(0.75)),
        dict(epoch=0, loss=0.5, accuracy=np.float64(0.25)),
        dict(epoch=1, loss=0.375),
    ])
    assert without_time(parser.history()) == [{"epoch": 0, "loss": 0.5, "accuracy": 0.25}, {"epoch": 1, "loss": 0.375}]
    assert without_time(parser.steps) == [{"epoch": 0, "step": 3, "loss": 0.75}]  # explicit: not scaled


def test_report_accepts_numpy_integers_for_step_and_epoch(monkeypatch, tmp_path):
    """`kwnb.report(step=optimizer.iterations.numpy(), ...)` passes a numpy integer; it must not crash the worker."""
    np = pytest.importorskip("numpy")
    parser = report_rows(monkeypatch, tmp_path, [dict(epoch=np.int32(1), step=np.int64(12), loss=0.5)])
    assert without_time(parser.steps) == [{"epoch": 1, "step": 12, "loss": 0.5}]


def test_reported_step_without_epoch_belongs_to_the_current_epoch(monkeypatch, tmp_path):
    parser = report_rows(monkeypatch, tmp_path, [dict(step=7, loss=0.5)])
    assert without_time(parser.steps) == [{"epoch": 0, "step": 7, "loss": 0.5}]
    parser = MetricsParser()
    parser.feed("Epoch 2/3\n")
    parser.add_reported({"time": 1.0, "epoch": None, "step": 7, "loss": 0.5})  # as kwnb.report writes it
    assert parser.steps == [{"epoch": 1, "step": 7, "loss": 0.5}]


def test_report_line_split_across_reads_is_not_lost(monkeypatch, tmp_path):
    """A read can end inside a line the worker is still writing (or at the follower's MAX_READ)."""
    monkeypatch.setenv("KWNB_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("KWNB_WORKER", "0")
    kwnb.report(epoch=0, loss=0.5)
    line = RunFolder(tmp_path).metrics(0).read_text()
    parser = MetricsParser()
    cut = len(line) // 2
    parser.feed_report_lines(line[:cut])
    parser.feed_report_lines(line[cut:])
    assert without_time(parser.history()) == [{"epoch": 0, "loss": 0.5}]


def test_report_outside_a_run_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("KWNB_RUN_DIR", raising=False)
    monkeypatch.delenv("KWNB_WORKER", raising=False)
    monkeypatch.chdir(tmp_path)
    kwnb.report(epoch=0, loss=1.0)
    assert list(tmp_path.iterdir()) == []


def test_garbage_report_lines_are_skipped():
    parser = MetricsParser()
    parser.feed_report_lines('not json\n{"epoch": 0, "step": null, "loss": 0.5, "note": "text"}\n{"epoch": 1, "lo\n')
    assert parser.history() == [{"epoch": 0, "loss": 0.5}]


# ----- helpers and limits -------------------------------------------------------------------------

def test_parse_metrics_ignores_eta_and_units():
    text = "- ETA: 3s - loss: 0.4321 - accuracy: 0.9000 - 759ms/epoch - 38ms/step"
    assert parse_metrics(text) == {"loss": 0.4321, "accuracy": 0.9}


def test_step_rows_are_thinned_beyond_the_limit(monkeypatch):
    monkeypatch.setattr(metrics_module, "MAX_STEP_ROWS", 10)
    parser = MetricsParser()
    parser.feed("Epoch 1/1\n")
    for step in range(1, 101):
        parser.feed(f"{step}/100 [===] - ETA: 0s - loss: {1 / step:.4f}\x08\r")
    assert 5 <= len(parser.steps) <= 10
    steps = [r["step"] for r in parser.steps]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert steps[-1] > 80  # the recent end of the curve is kept


def test_unknown_step_count():
    parser = parsed("Epoch 1/2\n", "     12/Unknown - 1s 10ms/step - loss: 0.5000\x08\r")
    assert parser.steps_per_epoch is None
    assert [(r["step"], r["loss"]) for r in parser.steps] == [(1, 0.5)]  # counted: no steps per epoch
    assert parser.progress() == (0.0, "epoch 1/2")


def test_a_bar_cut_by_the_script_s_own_line_is_a_step_not_the_epoch_s_end():
    """A callback printing at a step's end (benchmarks/workloads/train.py's "\\nBENCH step 1 T") ends the
    bar's line with its "\\n": read as the epoch's end, a worker's running values stood for the epoch's, and
    two workers' differed (not_distributed on 3 of 12 runs under the hub crowd). A bar still counting down
    ("ETA:") is a step drawn; the epoch's own line, drawn when it finishes, has no ETA."""
    parser = parsed("Epoch 1/1\n", " 1/40 [>....] - ETA: 1:00 - loss: 1.4110 - accuracy: 0.4062",
                    "\nBENCH step 1 1795644530.648720\n",
                    "\x08" * 10 + "\r 2/40 [>....] - ETA: 50s - loss: 1.2000 - accuracy: 0.5000")
    assert parser.epochs == {}
    parser.feed("\x08" * 10 + "\r40/40 [=====] - 3s 75ms/step - loss: 0.7000 - accuracy: 0.6000\n")
    assert parser.epochs == {0: {"epoch": 0, "loss": 0.7, "accuracy": 0.6}}
    assert [row["step"] for row in parser.steps][:2] == [1, 2]


def test_a_callback_print_between_the_last_steps_eta_and_the_epochs_line_leaves_the_epochs_values():
    """tf-keras draws the last step with an ETA before it finalizes the epoch's line; a callback that prints at the
    epoch's end (Kubeflow's multi-worker Keras example: "Learning rate for epoch 1 is ...") cuts that draw off as a
    line of its own. Its running values are summed over the 2 replicas (4.4629), the epoch's line after it is the
    epoch's (2.2314): a real worker's log (tests/data/tf-2.21/README.md)."""
    parser = MetricsParser()
    parser.feed((Path(__file__).parent / "data" / "tf-2.21" / "callback-print-cuts-last-step-worker-1.log").read_text())
    assert [(row["epoch"], row["loss"]) for row in parser.history()] == [(0, 2.2314), (1, 1.9897)]
