"""The error a tf.function raised, read from the lines TensorFlow prints below its own first line: pure, standard
library only (tf_messages.py's scanner feeds it the lines after such a traceback's last one).

An error inside a tf.function reaches the learner wrapped, its first line saying nothing of it. Two shapes, both
TensorFlow 2.21's (captured in tests/data/tf-2.21/tf-function-*.log):

- raised by the function's Python code while it is traced (autograph, `pyct/error_utils.py`'s `get_message`):

      ValueError: in user code:

          File "/work/loop.py", line 35, in step_fn  *
              loss = compute_loss(labels, logits)
          File ".../tf_keras/src/losses.py", line 157, in __call__  **
              reduction = self._get_reduction()

          ValueError: Please use `tf.keras.losses.Reduction.SUM` or ...

  frames indented 4 (`*` marks converted code, `**` allow-listed), their code 8, the raised error's own
  `Type: message` lines indented 4;
- raised by an op of its graph while it runs (`atomic_function.py`'s `interpolate`, `error_interpolation.py`):

      tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:

      Detected at node assert_equal_1/Assert/Assert defined at (most recent call last):
        File "/work/loop.py", line 32, in compute_loss

      assertion failed: [the batch is not 7 examples] ...

  each failing node's definition frames indented 2 (`<stack traces unavailable>` without them, `Node: '...'`
  after them), then the op's message, unindented.

Keras's layers raise `Exception encountered when calling layer '...'` with the real message on the next line
that holds one: that line is taken instead.
"""
from __future__ import annotations

import re
from typing import Callable

from .tf_events import Frame, Raised

IN_USER_CODE = "in user code:"
GRAPH_EXECUTION = "Graph execution error:"
KERAS_LAYER_CALL = "Exception encountered when calling layer"
_TRACED_FRAME = re.compile(r'    File "(.*)", line (\d+), in (.*?)(?:  \*\*?)?')
_TRACED_ERROR = re.compile(r"    ([A-Za-z_][\w.]*): ?(.*)")
_DEFINED_FRAME = re.compile(r'  File "(.*)", line (\d+), in (.*)')
_NODE_LINES = ("Detected at node ", "<stack traces unavailable>", "Node: '")


def wraps(message: str) -> bool:
    """Whether a traceback's first line only wraps the error a tf.function raised."""
    return message in (IN_USER_CODE, GRAPH_EXECUTION)


class WrappedError:
    """The lines below a wrapping traceback, taken one at a time (`take`) until the raised error is known (`done`)
    or a line that is no part of them ends them (`take` returns False). `raised()` is what was read so far."""

    def __init__(self, exc_type: str, message: str, is_user: Callable[[str], bool]):
        self.exc_type, self.graph, self._is_user = exc_type, message == GRAPH_EXECUTION, is_user
        self.frames: list[Frame] = []
        self.lines: list[str] = []
        self.found: tuple[str, str] | None = None  # the raised error's type and message
        self.done = False
        self._header: str | None = None  # the type of a Keras layer's error whose message is on a later line

    def take(self, line: str) -> bool:
        """One line (no newline): True if it belongs to the wrapped error (then `done` may have become True)."""
        if not line.strip():
            return True
        belongs = self._graph_line(line) if self.graph else self._traced_line(line)
        if belongs:
            self.lines.append(line)
        return belongs

    def raised(self) -> Raised | None:
        if self.found is None:
            return None
        user = next((f for f in reversed(self.frames) if self._is_user(f.file)), None)
        return Raised(exc_type=self.found[0], message=self.found[1], frames=tuple(self.frames), user_frame=user)

    def _traced_line(self, line: str) -> bool:
        if not line.startswith("    "):
            return False
        if self._header is not None:  # the line after a Keras layer's header that says what went wrong
            self.found, self.done = (self._header, line.strip()), True
            return True
        match = _TRACED_FRAME.fullmatch(line)
        if match:
            self.frames.append(Frame(match.group(1), int(match.group(2)), match.group(3)))
            return True
        error = None if line.startswith("     ") else _TRACED_ERROR.fullmatch(line)
        if error and self.frames:
            if error.group(2).startswith(KERAS_LAYER_CALL):
                self._header = error.group(1)
            else:
                self.found, self.done = (error.group(1), error.group(2)), True
        return True  # a frame's code (indented 8)

    def _graph_line(self, line: str) -> bool:
        match = _DEFINED_FRAME.fullmatch(line)
        if match:
            self.frames.append(Frame(match.group(1), int(match.group(2)), match.group(3)))
            return True
        if line.startswith(_NODE_LINES) or line.startswith("    "):  # (a frame's code, when the source was there)
            return True
        self.found, self.done = (self.exc_type, line.strip()), True
        return True
