"""Where a piece of a task's output ends: the one definition every reader of it shares.

A piece ends at `\\n` (a line) or at `\\r` (the line is drawn again from its start: a Keras progress bar writes
each frame as `\\r` + the bar + `\\b`s, so a frame ends where the next one begins). Each task's reader
(output.py) splits its log here once and hands only whole pieces to its sinks, so the metrics, TensorFlow's
messages and `kwnb run`'s terminal see the same boundaries and keep no partial line of their own; a parser
fed a text in arbitrary pieces on its own (a test, a whole file) splits it with the same class.

Styling is dropped here too: Keras 3 colours its bar with ANSI escapes even in a file
(`\x1b[1m 1/12\x1b[0m \x1b[32m━━\x1b[0m...`), which no terminal shows as text, so every sink reads the pieces
as a terminal shows them. No escape sequence holds a `\n` or `\r`, so a whole piece never holds a cut one: one
cut by a read waits, with the rest of its line, in the partial piece.
"""
from __future__ import annotations

import re

# The one cap on a line still being written: past it only its last MAX_PARTIAL characters wait for their end.
# No piece kwnb parses is that long (a Keras bar's frame is about 100 characters, TensorFlow's longest message
# lines about 2 KiB); a line with no end in sight (a script printing dots) then costs at most one 64 KiB copy a
# read, where keeping it whole grew with every read.
MAX_PARTIAL = 64 << 10
# A terminal's control sequence (ESC [ parameters, intermediates, final byte: ECMA-48's CSI, which carries colours,
# bold and cursor moves): drawn as nothing.
STYLING = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def unstyled(text: str) -> str:
    """`text` without its control sequences, as a terminal shows it (no copy when it has none, as most logs)."""
    return STYLING.sub("", text) if "\x1b" in text else text


class LineSplitter:
    """Fed text in arbitrary pieces, returns the whole pieces (each ended by `\\n` or `\\r`) and keeps the rest."""

    def __init__(self):
        self.partial = ""  # after the last `\n` or `\r`: the piece still being written

    def split(self, text: str) -> str:
        """The whole pieces that `text` completes, as one string without styling (empty when it completes none)."""
        text = self.partial + text if self.partial else text
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        rest = text[cut:]
        self.partial = rest[-MAX_PARTIAL:] if len(rest) > MAX_PARTIAL else rest
        return unstyled(text[:cut])

    def close(self) -> str:
        """The piece no `\\n` or `\\r` ended, ended here (the writer has ended): the rest, with a `\\n`."""
        rest, self.partial = self.partial, ""
        return unstyled(rest) + "\n" if rest else ""
