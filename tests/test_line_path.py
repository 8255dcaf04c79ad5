"""The per-line path's shortcuts (engine/readers/screen.py's plain bursts, tf_messages.runtime_line_numbers, the
reader's runtime-line places in engine/readers/output.py) give the same answers as rendering and testing every
line one by one, on real logs cut anywhere."""
from __future__ import annotations

from pathlib import Path

import pytest

from chunking import random_chunks
from kwnb.engine.readers import tf_messages as tf
from kwnb.engine.readers.lines import unstyled
from kwnb.engine.readers.output import TaskOutput
from kwnb.engine.readers.screen import TerminalScreen, render_line

DATA = Path(__file__).parent / "data"
LOGS = sorted(p.relative_to(DATA).as_posix() for p in [*DATA.glob("*.log"), *DATA.glob("tf-2.21/*.log"), *DATA.glob("keras3/*.log")])
MIXED = ("plain line 1\nI0000 00:00:1795460621.508971  7334 port.cc:153] runtime   \n/job:worker/replica:0/task:1\n"
         "Epoch 1/3\n 1/20 [>....] - ETA: 0s - loss: 0.5\r 2/20 [=>...] - loss: 0.4\nTo enable the following "
         "instructions: AVX2\n\x1b[31mred\x1b[0m text  \n\nWARNING: All log messages before absl::InitializeLog()\n"
         "2024-01-02 03:04:05.123456: I tensorflow/core/x.cc:1] old format\n" + "A user line\n" * 500 + "last, unfinished")


def one_by_one(text: str, keep: int) -> tuple:
    """The plain way: every line rendered and tested on its own."""
    line, cursor, finished = "", 0, []
    for part in text.split("\n")[:-1]:
        line, cursor = render_line(part, line, cursor)
        finished.append(line.rstrip())
        line, cursor = "", 0
    current, _ = render_line(text.split("\n")[-1])
    return finished[-keep:], len(finished), current, sum(map(tf.is_runtime_line, finished))


@pytest.mark.parametrize("name", [*LOGS, "mixed"])
@pytest.mark.parametrize("keep", [3, 300])
def test_chunked_feeds_match_the_plain_way(name, keep):
    text = MIXED if name == "mixed" else (DATA / name).read_bytes().decode("utf-8", errors="replace")
    expected_lines, expected_total, expected_current, expected_runtime = one_by_one(text, keep)
    for seed in (0, 1):
        screen, runtime, returned = TerminalScreen(keep=keep), 0, []
        for chunk in random_chunks(text, seed=seed, largest=5000):
            finished = screen.feed_text(chunk)
            runtime += tf.count_runtime_lines(finished)
            returned += [line.rstrip() for line in finished.split("\n")[:-1]]
        assert list(screen.lines) == expected_lines
        assert screen.total_lines == expected_total == len(returned)
        assert screen.current.rstrip() == expected_current.rstrip()
        assert runtime == expected_runtime
        assert returned[-keep:] == expected_lines
    if name == "mixed":
        assert expected_runtime == 5


def test_a_burst_longer_than_keep_keeps_its_last_lines_and_counts_all():
    screen = TerminalScreen(keep=2)
    screen.feed("drawn\r")
    assert screen.feed_text("over\nb  \nc\nd\n") == "overn\nb\nc\nd\n"  # after \r: rendered one by one
    assert list(screen.lines) == ["c", "d"] and screen.total_lines == 4
    screen.feed("e")
    assert screen.feed_text("f\ng\nh\n") == "ef\ng\nh\n"  # plain: the line being drawn comes first
    assert list(screen.lines) == ["g", "h"] and screen.total_lines == 7 and screen.current == ""


@pytest.mark.parametrize("name", [*LOGS, "mixed"])
@pytest.mark.parametrize("keep", [3, 300])
def test_the_reader_classifies_each_line_once_as_the_plain_way_does(name, keep):
    """Each read's lines come to the sinks with their runtime lines marked, and the tail views copy marks the same
    lines, wherever the reads cut the log."""
    text = MIXED if name == "mixed" else (DATA / name).read_bytes().decode("utf-8", errors="replace")
    expected_lines, expected_total, _, expected_runtime = one_by_one(text, keep)
    for seed in (0, 1):
        given = []
        output = TaskOutput("unread.log", keep=keep, sinks=(given.append,))
        for chunk in random_chunks(text, seed=seed, largest=5000):
            output.feed(chunk)
        handed = [pair for lines in given for pair in lines.lines()]
        assert [line for line, _ in handed][-keep:] == expected_lines and len(handed) == expected_total
        assert [line for line, runtime in handed if runtime] == [line for line, _ in handed if tf.is_runtime_line(line)]
        assert output.runtime_lines == sum(len(lines.runtime) for lines in given) == expected_runtime
        tail, runtime = output.tail()
        assert [place for place, line in enumerate(tail) if tf.is_runtime_line(line)] == list(runtime)
        assert tail[:len(expected_lines)] == tuple(expected_lines)


def test_the_line_being_drawn_is_marked_as_it_is_now():
    output = TaskOutput("unread.log", keep=2)
    output.feed("a\nI0000 00:00:1795460621.508971  7334 port.cc:153] runtime\nb\nI0000 00:00:1795460621.5")
    assert output.tail() == (("I0000 00:00:1795460621.508971  7334 port.cc:153] runtime", "b", "I0000 00:00:1795460621.5"),
                             (0,))
    output.feed("08971  7334 port.cc:153] done\n")
    assert output.tail() == (("b", "I0000 00:00:1795460621.508971  7334 port.cc:153] done"), (1,))
    assert output.runtime_lines == 2 and output.total_lines == 4


@pytest.mark.parametrize("name", [*LOGS, "mixed"])
def test_every_sink_sees_the_same_line_boundaries(name, tmp_path):
    """The reader splits once: in every read, the whole pieces the parsers get hold exactly the newlines of the
    lines the screen, the kept file and `kwnb run`'s terminal get, and the pieces together are the log as written
    up to its last boundary, less its styling (a terminal draws no escape sequence); nothing is held back by a
    sink. At the end the last line ends for all of them."""
    from kwnb.engine.readers.metrics import MetricsParser
    from kwnb.engine.readers.output import read_kept

    text = MIXED if name == "mixed" else (DATA / name).read_bytes().decode("utf-8", errors="replace")
    given, kept = [], tmp_path / "task.screen"
    parsers = (MetricsParser(), tf.TfLogScanner())
    take = lambda lines: (given.append(lines), parsers[0].take(lines.text), parsers[1].take(lines.text))
    output = TaskOutput("unread.log", keep=3, sinks=(take,), kept=kept)
    for chunk in random_chunks(text, seed=2, largest=5000):
        lines = output.feed(chunk)
        assert lines.text.count("\n") == lines.finished.count("\n"), repr(chunk)
        assert not lines.text or lines.text[-1] in "\r\n"
    pieces = "".join(lines.text for lines in given)
    cut = max(text.rfind("\n"), text.rfind("\r")) + 1
    assert pieces == unstyled(text[:cut])
    assert (output.end() is not None) == bool(text[text.rfind("\n") + 1:].strip()) and output.drawing() is None
    pieces = "".join(lines.text for lines in given)
    assert pieces.count("\n") == output.total_lines == output.kept_lines == len(read_kept(kept))
    whole = MetricsParser()
    whole.feed(text + "\n")
    assert repr((parsers[0].history(), parsers[0].steps)) == repr((whole.history(), whole.steps))  # NaN != NaN
    assert [line for lines in given for line, _ in lines.lines()] == [line for line, _ in read_kept(kept)]
    assert [runtime for lines in given for _, runtime in lines.lines()] == [runtime for _, runtime in read_kept(kept)]


def test_a_line_the_task_ended_ends_once_and_the_next_attempt_starts_anew(tmp_path):
    """A task killed while drawing a bar: the bar's line ends at its end for the screen, the parsers and the
    kept file; the next attempt's separator, which starts with a newline, adds no empty line."""
    from kwnb.engine.readers.output import read_kept

    given, kept = [], tmp_path / "task.screen"
    output = TaskOutput("unread.log", keep=10, sinks=(given.append,), kept=kept)
    output.feed("Epoch 1/2\n 1/4 [==>....] - ETA: 0s - loss: 0.5\x08\x08\r 2/4 [====>..] - ETA: 0s - loss: 0.4")
    ended = output.end()
    assert ended.text == " 2/4 [====>..] - ETA: 0s - loss: 0.4\n" and ended.finished.rstrip() == " 2/4 [====>..] - ETA: 0s - loss: 0.4"
    assert output.end() is None and output.drawing() is None
    output.feed("\n===== kwnb: restart 1 of the cluster =====\nagain\n")
    assert [line for line, _ in read_kept(kept)] == ["Epoch 1/2", " 2/4 [====>..] - ETA: 0s - loss: 0.4",
                                                     "===== kwnb: restart 1 of the cluster =====", "again"]
    assert output.tail()[0] == tuple(line for line, _ in read_kept(kept))
