"""An error raised inside a tf.function (issue 39, item 2): TensorFlow wraps it, its first line saying only
`ValueError: in user code:` or `InvalidArgumentError: Graph execution error:`; kwnb quotes the error the function
raised, where in the user's code, and the fix where it knows one. Read on real captured logs of a custom training
loop under MultiWorkerMirroredStrategy (tests/scripts/tf_function_errors.py, tests/data/replays/tf-function-*), told
on their replays and on one real run."""
from __future__ import annotations

from pathlib import Path

import pytest

import kwnb
from kwnb.engine.readers import tf_events
from kwnb.engine.readers.tf_messages import TfLogScanner, scan
from replay import captured_text

SCRIPT = Path(__file__).parent / "scripts" / "tf_function_errors.py"
_SOURCE = SCRIPT.read_text().splitlines()
USER = ("tf_function_errors.py",)


def line_of(text: str) -> int:
    return 1 + next(i for i, line in enumerate(_SOURCE) if text in line)


# capture -> (the raised error's type, its message's start, the user's frame where it arose)
RAISED = {
    "reduction": ("ValueError", "Please use `tf.keras.losses.Reduction.SUM` or `tf.keras.losses.Reduction.NONE`",
                  f"tf_function_errors.py line {line_of('per_example_loss = loss_object(')}, in compute_loss"),
    "raise": ("ValueError", "labels of shape (None,) do not match logits of shape (None, 2)",
              f"tf_function_errors.py line {line_of('raise ValueError(')}, in compute_loss"),
    "layer": ("ValueError", 'Input 0 of layer "sequential" is incompatible with the layer: expected shape=(None, 8), '
              'found shape=(None, 4)',
              f"tf_function_errors.py line {line_of('logits = model(features')}, in step_fn"),
    "assert": ("InvalidArgumentError", "assertion failed: [the batch is not 7 examples]",
               f"tf_function_errors.py line {line_of('tf.debugging.assert_equal(')}, in compute_loss"),
}
FIRST_LINES = {"reduction": "in user code:", "raise": "in user code:", "layer": "in user code:",
               "assert": "Graph execution error:"}


def tracebacks(text: str, scanner: TfLogScanner | None = None, piece: int = 0) -> list[tf_events.PythonTraceback]:
    scanner = scanner or TfLogScanner(USER)
    pieces = [text[i:i + piece] for i in range(0, len(text), piece)] if piece else [text]
    events = [event for chunk in pieces for event in scanner.feed(chunk)] + scanner.close()
    return [event for event in events if isinstance(event, tf_events.PythonTraceback)]


@pytest.mark.parametrize("mistake", sorted(RAISED))
@pytest.mark.parametrize("task", ["worker-0", "worker-1"])
def test_the_error_a_tf_function_raised_is_read_below_tensorflows_first_line(mistake, task):
    short_type, message, where = RAISED[mistake]
    (traceback,) = tracebacks(captured_text(f"tf-function-{mistake}", task))
    assert traceback.message == FIRST_LINES[mistake]  # the line kwnb quoted before: kept as printed
    assert str(traceback.where).endswith("in <module>")  # the call of the tf.function
    said_type, said, frame = traceback.error
    assert (said_type, str(frame)) == (short_type, where) and said.startswith(message), traceback.error
    assert any(message in line for line in traceback.lines[-6:])  # the evidence a diagnosis shows


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_the_raised_error_is_read_the_same_whatever_pieces_the_log_comes_in(piece):
    text = captured_text("tf-function-layer", "worker-0")
    whole = tracebacks(text)
    assert tracebacks(text, piece=piece) == whole and whole[0].raised is not None


def test_a_wrapping_traceback_cut_short_is_still_told_when_the_task_ends():
    """The task died while TensorFlow printed the wrapped error: the traceback goes as printed, at the end."""
    text = captured_text("tf-function-reduction", "worker-0")
    cut = text[:text.index("ValueError: in user code:")] + "ValueError: in user code:\n\n"
    scanner = TfLogScanner(USER)
    assert not [e for e in scanner.feed(cut) if isinstance(e, tf_events.PythonTraceback)]  # waiting for the rest
    (traceback,) = [e for e in scanner.end() if isinstance(e, tf_events.PythonTraceback)]
    assert traceback.raised is None and traceback.error[:2] == ("ValueError", "in user code:")


def test_a_lost_peers_graph_error_still_reads_as_before_with_its_real_message():
    """The survivor of a lost peer: its UnavailableError keeps its type and frames (peer_lost reads them), and the
    message below "Graph execution error:" is read too; gRPC's details after it still name the peer."""
    text = (Path(__file__).parent / "data" / "tf-2.21" / "peer-raises-worker-0.log").read_text()
    events = scan(text, ("train.py",))
    (traceback,) = [e for e in events if isinstance(e, tf_events.PythonTraceback)]
    assert traceback.short_type == "UnavailableError" and traceback.message == "Graph execution error:"
    assert traceback.raised.message == "Collective ops is aborted by: Socket closed"
    assert ("worker", 1) in {e.task for e in events if isinstance(e, tf_events.PeerUnavailable)}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mistake", sorted(RAISED))
def test_the_error_diagnosis_quotes_the_raised_error_and_its_line(replayed, mistake):
    run = replayed[f"tf-function-{mistake}"]
    short_type, message, where = RAISED[mistake]
    errors = [d for d in run.diagnoses if d.kind == "error"]
    assert errors, run.summary()
    for error in errors:
        assert f"failed with {short_type}: {message}" in error.message and f"({where})" in error.message, error
        assert "in user code" not in error.message and "Graph execution error" not in error.message
    assert run.reason.startswith(errors[0].cause[:40]), run.reason


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_keras_loss_with_its_default_reduction_is_told_with_its_fix_on_a_real_run(tmp_path):
    """The issue's run: a Keras loss of default reduction called inside strategy.run, on real TensorFlow."""
    run = kwnb.launch(SCRIPT, n=2, args="reduction", runs_dir=tmp_path / "runs", cwd=tmp_path, name="reduction")
    assert run.wait(400, pictures=True) == [1, 1], run.summary()
    short_type, message, where = RAISED["reduction"]
    errors = [d for d in run.diagnoses if d.kind == "error"]
    assert errors, run.summary()
    said = errors[0].message
    assert f"failed with {short_type}: {message}" in said and f"({where})" in said, said
    assert "reduction=tf.keras.losses.Reduction.NONE" in said and "tf.nn.compute_average_loss" in said, said
    assert "in user code" not in run.reason and message[:30] in run.reason, run.reason


def test_a_keras_layers_header_is_passed_over_for_the_line_that_says_what_went_wrong():
    """tf-keras's layers wrap an error raised in their call() (utils/traceback_utils.py,
    inject_argument_info_in_traceback): a header, a blank line, then the error's own words; the header is skipped."""
    text = captured_text("tf-function-layer", "worker-0")
    start, own = text.index("    ValueError: Input 0"), 'Input 0 of layer "sequential" is incompatible'
    end = text.index("\n", start)
    wrapped = (text[:start] + "    ValueError: Exception encountered when calling layer 'sequential' (type Sequential)."
               "\n    \n    " + text[start + len("    ValueError: "):end] + "\n    \n    Call arguments received by "
               "layer 'sequential' (type Sequential):\n      \u2022 inputs=tf.Tensor(shape=(None, 4), dtype=float32)\n")
    (traceback,) = tracebacks(wrapped)
    said = text[start + len("    ValueError: "):end]
    assert traceback.error[:2] == ("ValueError", said) and own in said
