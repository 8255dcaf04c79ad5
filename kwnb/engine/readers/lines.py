"""Where a piece of a task's output ends: the one definition every reader of it shares.

A piece ends at `\\n` (a line) or at `\\r` (the line is drawn again from its start: a Keras progress bar writes
each frame as `\\r` + the bar + `\\b`s, so a frame ends where the next one begins). Each task's reader
(output.py) splits its log here once and hands only whole pieces to its sinks, so the metrics, TensorFlow's
messages and `kwnb run`'s terminal see the same boundaries and keep no partial line of their own; a parser
fed a text in arbitrary pieces on its own (a test, a whole file) splits it with the same class.
"""
from __future__ import annotations

# The one cap on a line still being written: past it only its last MAX_PARTIAL characters wait for their end.
# No piece kwnb parses is that long (a Keras bar's frame is about 100 characters, TensorFlow's longest message
# lines about 2 KiB); a line with no end in sight (a script printing dots) then costs at most one 64 KiB copy a
# read, where keeping it whole grew with every read.
MAX_PARTIAL = 64 << 10


class LineSplitter:
    """Fed text in arbitrary pieces, returns the whole pieces (each ended by `\\n` or `\\r`) and keeps the rest."""

    def __init__(self):
        self.partial = ""  # after the last `\n` or `\r`: the piece still being written

    def split(self, text: str) -> str:
        """The whole pieces that `text` completes, as one string (empty when it completes none)."""
        text = self.partial + text if self.partial else text
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        rest = text[cut:]
        self.partial = rest[-MAX_PARTIAL:] if len(rest) > MAX_PARTIAL else rest
        return text[:cut]

    def close(self) -> str:
        """The piece no `\\n` or `\\r` ended, ended here (the writer has ended): the rest, with a `\\n`."""
        rest, self.partial = self.partial, ""
        return rest + "\n" if rest else ""
