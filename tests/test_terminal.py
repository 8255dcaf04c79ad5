"""kwnb.engine.readers.screen: a byte stream rendered as a terminal shows it, whatever the chunking."""
from __future__ import annotations

from pathlib import Path

import pytest

from chunking import random_chunks
from kwnb.engine.readers.screen import TerminalScreen, render_line

DATA = Path(__file__).parent / "data"
FIXTURES = ["keras_verbose1.log", "keras_verbose2.log"]


def read_fixture(name: str) -> str:
    return (DATA / name).read_bytes().decode("utf-8")


def rendered(*chunks: str, keep: int = 300) -> TerminalScreen:
    screen = TerminalScreen(keep=keep)
    for chunk in chunks:
        screen.feed(chunk)
    return screen


def state(screen: TerminalScreen) -> tuple:
    return list(screen.lines), screen.current, screen.total_lines, screen.hidden_lines, screen.tail()


# ----- single rules -------------------------------------------------------------------------------

def test_carriage_return_overwrites_from_line_start():
    assert rendered("loading\rLOAD\n").lines[-1] == "LOADing"
    assert rendered("abc\rxyz\n").lines[-1] == "xyz"


def test_backspace_steps_back_one_column():
    assert rendered("abc\b\bX\n").lines[-1] == "aXc"
    assert rendered("abc\bd\n").lines[-1] == "abd"


def test_backspace_at_column_zero_stays_there():
    assert rendered("ab\b\b\b\b\bX\n").lines[-1] == "Xb"


def test_shorter_overwrite_keeps_the_tail_of_the_longer_line():
    assert rendered("12345678\rab\n").lines[-1] == "ab345678"
    # progress-bar style: step back over the whole line, return, draw a shorter one
    assert rendered("10/20 loss 1.5" + "\b" * 14 + "\r" + "20/20\n").lines[-1] == "20/20 loss 1.5"


def test_render_line_returns_cursor():
    line, cursor = render_line("hello\r\bHE")
    assert (line, cursor) == ("HEllo", 2)
    line, cursor = render_line("ab\b", "xyz", 1)
    assert (line, cursor) == ("xab", 2)


def test_ansi_escapes_are_dropped():
    screen = rendered("\x1b[1m\x1b[32mgreen\x1b[0m and \x1b[2Kplain\n")
    assert screen.lines[-1] == "green and plain"


def test_ansi_escape_split_across_feeds_is_still_dropped():
    """A worker's colour codes reach the kernel in whatever pieces a read returns.

    The same bytes split inside the escape must render exactly as when fed at once.
    """
    text = "\x1b[32mgreen\x1b[0m done\n"
    whole = rendered(text)
    assert whole.lines[-1] == "green done"
    for cut in range(1, len(text)):
        split = rendered(text[:cut], text[cut:])
        assert list(split.lines) == ["green done"], f"split after {text[:cut]!r}"


def test_crlf_line_end_keeps_the_line():
    assert list(rendered("one\r\ntwo\r\n").lines) == ["one", "two"]


def test_trailing_spaces_are_stripped_from_finished_lines():
    assert rendered("abc   \n").lines[-1] == "abc"


def test_empty_lines_are_kept():
    screen = rendered("a\n\n\nb\n")
    assert list(screen.lines) == ["a", "", "", "b"]
    assert screen.total_lines == 4


# ----- incremental feeding ------------------------------------------------------------------------

def test_line_split_across_feeds():
    screen = TerminalScreen()
    assert screen.feed("hel") == []
    assert screen.current == "hel"
    assert screen.feed("lo\rj") == []
    assert screen.feed("\n") == ["jello"]
    assert screen.current == ""


def test_backspace_and_return_split_across_feeds():
    assert rendered("abc", "\b", "\b", "X", "\r", "Z", "\n").lines[-1] == "ZXc"
    assert rendered("abc\r", "\n").lines[-1] == "abc"


def test_feed_returns_only_the_lines_it_finished():
    screen = TerminalScreen()
    assert screen.feed("a\nb\nc") == ["a", "b"]
    assert screen.feed("d\ne\n") == ["cd", "e"]


def test_tail_includes_the_line_being_drawn():
    screen = rendered("one\ntwo\n 3/10 [==>", " ETA")
    assert screen.tail() == ["one", "two", " 3/10 [==> ETA"]
    assert screen.tail(1) == [" 3/10 [==> ETA"]
    assert rendered("one\n   ").tail() == ["one"]  # blank unfinished line is not shown


def test_keep_bounds_memory_and_hidden_lines_counts_the_rest():
    screen = TerminalScreen(keep=3)
    for i in range(10):
        screen.feed(f"line {i}\n")
    assert list(screen.lines) == ["line 7", "line 8", "line 9"]
    assert screen.total_lines == 10
    assert screen.hidden_lines == 7
    assert screen.tail(2) == ["line 8", "line 9"]
    screen.feed("line 10 (unfinished)")
    assert screen.tail() == ["line 7", "line 8", "line 9", "line 10 (unfinished)"]
    assert screen.hidden_lines == 7


def test_no_lines_hidden_below_keep():
    screen = rendered("a\nb\n", keep=5)
    assert screen.hidden_lines == 0 and screen.total_lines == 2


# ----- real tf-keras output -----------------------------------------------------------------------

def reference_rendering(text: str) -> tuple[list[str], str]:
    """What a terminal shows for tf-keras output, computed the simple way.

    tf-keras redraws a progress line by writing backspaces and `\\r`, then the new line padded with
    spaces to the previous width; so each line ends up showing its last `\\r`-separated segment.
    """
    lines = text.split("\n")
    shown = [line.split("\r")[-1].replace("\b", "").rstrip() for line in lines]
    return shown[:-1], shown[-1]


@pytest.mark.parametrize("name", FIXTURES)
def test_keras_log_renders_as_a_terminal_shows_it(name):
    text = read_fixture(name)
    expected_lines, expected_current = reference_rendering(text)
    screen = rendered(text, keep=10_000)
    assert list(screen.lines) == expected_lines
    assert screen.current.rstrip() == expected_current
    # The epoch summaries survive as clean lines, with no fragments of the redraws before them.
    epoch_ends = [line for line in screen.lines if " - loss: " in line and "ETA" not in line]
    assert len(epoch_ends) == 3
    assert all(line.startswith("20/20 ") for line in epoch_ends)
    assert not any("\r" in line or "\b" in line for line in screen.lines)


@pytest.mark.parametrize("name", FIXTURES)
def test_keras_log_fed_byte_by_byte_renders_the_same(name):
    text = read_fixture(name)
    assert text.isascii()  # so one character is one byte
    whole = rendered(text, keep=10_000)
    by_byte = rendered(*text, keep=10_000)
    assert state(by_byte) == state(whole)


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_keras_log_in_random_chunks_renders_the_same(name, seed):
    text = read_fixture(name)
    whole = rendered(text, keep=10)  # a small keep: the bounded deque must agree too
    chunked = rendered(*random_chunks(text, seed), keep=10)
    assert state(chunked) == state(whole)
    assert whole.hidden_lines == whole.total_lines - 10 > 0


@pytest.mark.parametrize("name", FIXTURES)
def test_feed_return_values_add_up_to_the_screen(name):
    text = read_fixture(name)
    screen = TerminalScreen(keep=10_000)
    finished = []
    for chunk in random_chunks(text, seed=7, largest=300):
        finished += screen.feed(chunk)
    assert finished == list(screen.lines)
    assert len(finished) == text.count("\n") == screen.total_lines
