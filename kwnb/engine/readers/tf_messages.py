"""Recognise TensorFlow's multi-worker messages in a task's log: pure functions, standard library only.

`TfLogScanner.take(text)` takes whole pieces of the log as a task's reader hands them (engine/readers/lines.py:
each ended by `\\n` or `\\r`) and returns the events they show; `feed(chunk)` splits text cut anywhere the same
way first; `scan(text)` does a whole log.
`is_runtime_line(line)` tells TensorFlow's C++ runtime chatter from the learner's own output (asked once per
line by each task's reader, output.py: views read its marks).
The events it returns are tf_events.py's. The message shapes are those of TF 2.21, captured in tests/data/tf-2.21/ (see its README.md).

Reading the events (what TF 2.21 does, measured in the README):
- WaitingForPeers is logged by the chief only, once per change and never repeated: time the wait yourself
  (no `waiting == 0` event 10 s later). A non-chief whose chief is missing logs nothing after ServerStarted:
  ServerStarted without AgentConnected is its sign.
- Unhealthy also comes at a clean end, when a peer exited 0 more than ~10 s before the chief: it is harmless
  when the named task had already exited 0.
- One lost peer gives PeerUnavailable twice: from the C++ line (no task) and from gRPC's detail (with it).

Cost: a chunk whose complete lines hold none of MARKERS (progress bars, prints: nearly all of a log) costs
a dozen substring scans in C and no regex; only lines with a marker, or inside a traceback, are examined.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field

from . import fault_dump
from .lines import LineSplitter
from .wrapped import WrappedError, wraps
from .tf_events import AgentConnected, BindFailure, CollectiveMismatch, Event, Frame, InputExhausted, Keras3PerReplica, NonFiniteLoss, PeerUnavailable, PythonTraceback, ServerStarted, Task, TaskConnected, Unhealthy, WaitingForPeers


# A line holding none of these needs no closer look (the cheap prefilter before any regex).
MARKERS = (
    "Started server with target", "has connected to coordination service", "Coordination agent has",
    "tasks to connect.", "Example stragglers:", "/task:", "unhealthy", "UNAVAILABLE", "grpc_status:14",
    "Traceback (most recent call last):", "PerReplica:", "Could not start gRPC server", "Failed to add port",
    "Your input ran out of data", "Collective instance", "collective instance", "nan", "NaN", "inf", fault_dump.MARKER,
)

_TASK = re.compile(r"/job:([\w-]+)(?:/replica:\d+)?/task:(\d+)")
_TASK_LINE = re.compile(r"/job:[\w-]+(?:/replica:\d+)?/task:\d+")
_WAITING = re.compile(r"Waiting for (\d+)/(\d+) tasks to connect\.")
_SERVER = re.compile(r"Started server with target: grpc://(\S+)")
_ADDRESS = re.compile(r"ipv[46]:(\[[^\]]*\]:\d+|[\w.-]+:\d+)")
_ADD_PORT = re.compile(r"resolved for '([^']+)'")
_FRAME = re.compile(r'  File "(.*)", line (\d+), in (.*)')
_EXCEPTION = re.compile(r"([\w.]+)(?:: ?(.*))?")
# "I0000 00:00:1795460621.508971  7334 port.cc:153] ": before absl::InitializeLog() the date is 0000 and the
# seconds count from 1970; after it, "I1123 19:03:41.508971 ...".
_ABSL = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] ")
_OLD_TF = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+:\d+\] ")  # TF <= 2.15
RUNTIME_PREFIX = re.compile(f"{_ABSL.pattern}|{_OLD_TF.pattern}")  # either, anywhere in a line (metrics.py)
_PROGRESS = re.compile(r"(\d+)/(\d+) [\[━]")  # the Keras bar a warning was glued to: "4/5 [====>..] - ...", "4/5 ━━━━━━━ ..."
# Keras 3 warns that the input "ran out" at the end of its first pass over data of unknown length (a generator, a
# filtered dataset), its bar at "12/Unknown", and goes on with the next epoch: how it learns the epoch's length.
_FIRST_PASS = re.compile(r"\d+/Unknown ")
_MISMATCH = re.compile(r"(Shape|Type|type) mismatch in the collective instance (\d+)|Collective instance (\d+) expected")
# A loss printed NaN or infinite by the learner's own loop ("step 3 loss tf.Tensor(nan, ...)", "loss = -inf"): the
# value right after the name, past a separator ("val_loss improved from inf to 0.69", ModelCheckpoint's first
# epoch, is not one), and no colon after it ("loss has nan: False" is a check).
_NONFINITE = re.compile(r"(?i)\b(\w*loss\w*)\b\s*(?:[:=]|is)?\s*(?:tf\.Tensor\(|array\(|\[)?\s*"
                        r"[-+]?(nan|inf(?:inity)?)(?![\w:?])")
_REASONS = ("Connection reset by peer", "Socket closed", "Connection refused", "failed to connect to all addresses")
# Lines that continue a multi-line runtime message (straggler and unhealthy lists, gRPC error details).
_CONTINUATIONS = (
    "WARNING: All log messages before absl::InitializeLog()", "To enable the following instructions:",
    "The tasks have crashed. Check the task logs", "Additional GRPC error information from remote target",
    ":UNKNOWN:Error received from peer", "The error could be from a previous operation.", "\t [[{{node ",
)


def parse_task(text: str) -> Task | None:
    """("worker", 1) for the first `/job:worker/replica:0/task:1` (or `/job:worker/task:1`) in text."""
    match = _TASK.search(text)
    return (match.group(1), int(match.group(2))) if match else None


def is_runtime_line(line: str) -> bool:
    """True for TensorFlow's C++ runtime lines, to fold them out of the visible log.

    absl-prefixed lines (`I0000 00:00:...`, `W0000`, `E0000`, and TF <= 2.15's `2024-.. : I ...`), the absl
    warning, the CPU-instructions notice and the continuation lines of runtime messages. A line with a
    `\\r` or `\\b` in it is a Keras progress bar (a runtime line glued to one stays visible), never folded.
    """
    line = line.rstrip("\n")
    if not line or "\r" in line or "\b" in line:
        return False
    first = line[0]
    if first in "IWEF" and line[1:5].isdigit():
        return _ABSL.match(line) is not None
    if first == "2" and line[4:5] == "-":
        return _OLD_TF.match(line) is not None
    if first == "/":
        return _TASK_LINE.fullmatch(line) is not None
    return line.startswith(_CONTINUATIONS)


# Where a line may begin that is_runtime_line could fold: one search over a burst of lines, so that the
# learner's own lines (nearly all of a chatty log) are never looked at one by one.
_RUNTIME_START = re.compile("\n(?=[IWEF]\\d|2\\d{3}-|/|" + "|".join(map(re.escape, _CONTINUATIONS)) + ")")


def runtime_line_numbers(finished: str) -> list[int]:
    """Which of the lines in `finished` (each ended by `\\n`) are runtime lines (is_runtime_line), counted
    from 0: the one decision, made once per line by a task's reader (engine/readers/output.py)."""
    text = "\n" + finished
    count, find = text.count, text.index  # bound once: ~0.2 us a candidate line saved
    numbers, number, counted_to = [], 0, 0  # the line after the `\n` at counted_to; counted on from there: O(text)
    for match in _RUNTIME_START.finditer(text, 0, len(text) - 1):
        start = match.start()
        number += count("\n", counted_to, start)
        counted_to = start
        if is_runtime_line(text[start + 1:find("\n", start + 1)].rstrip()):
            numbers.append(number)
    return numbers


def count_runtime_lines(finished: str) -> int:
    """How many of the lines in `finished` (each ended by `\\n`) are runtime lines."""
    return len(runtime_line_numbers(finished))


@dataclass
class _Traceback:
    lines: list = field(default_factory=list)
    frames: list = field(default_factory=list)


class TfLogScanner:
    """Fed a task's log in chunks, returns the events of each complete line (`\\n` or `\\r` ends one).

    user_files: the learner's own files (the script); an absolute path matches a frame's file exactly, a
    relative one matches its end ("main.py" matches "/work/run/main.py"). Repeated reports of the same
    unhealthy set, unavailable peer, bind failure or Keras 3 failure are returned once.
    `stats` counts the lines examined and the regex calls made, to check the cost without a clock.
    """

    def __init__(self, user_files=()):
        self._user_abs = {os.path.normpath(f) for f in user_files if os.path.isabs(f)}
        self._user_rel = tuple("/" + os.path.normpath(f) for f in user_files if not os.path.isabs(f))
        self._split = LineSplitter()  # only for text fed in arbitrary pieces (feed): a task's reader splits its own
        self._tb: _Traceback | None = None
        self._wrapped: tuple[PythonTraceback, WrappedError] | None = None  # a traceback whose real error follows
        self._list = None  # (event class, fields, evidence) while task lines may follow a header
        self._remote: tuple[str, Task] | None = None  # the last "remote target" line, for its status line
        self._add_port: str | None = None
        self._fault: fault_dump.FaultDump | None = None  # a faulthandler dump being read
        self._seen: set = set()
        self.stats = {"lines": 0, "regex": 0}

    def feed(self, chunk: str) -> list[Event]:
        """Output in arbitrary pieces (a test, a whole log): split as a task's reader splits it (readers/lines.py)."""
        return self.take(self._split.split(chunk))

    def close(self) -> list[Event]:
        """The events of a last line that no newline ended, fed with `feed` (the task has exited)."""
        return self.take(self._split.close()) + self.end()

    def end(self) -> list[Event]:
        """The task has exited: a traceback still waiting for the error a tf.function raised goes as it is."""
        events: list[Event] = []
        if self._wrapped is not None:
            self._unwrap(events)
        if self._fault is not None:
            events.append(self._fault.crash())
            self._fault = None
        return events

    def take(self, body: str) -> list[Event]:
        """The events of whole pieces of output, each ended by `\n` or `\r`, as a task's reader hands them."""
        if not body:
            return []
        if self._tb is None and self._list is None and self._wrapped is None and self._fault is None and \
                not any(marker in body for marker in MARKERS):
            return []  # (an open traceback, list or wrapped error ends at a later line: read whatever it holds)
        return self._lines(body)

    def _lines(self, body: str) -> list[Event]:
        events: list[Event] = []
        for line in body.replace("\r", "\n").split("\n"):
            if line:
                self._line(line, events)
        return events

    def _line(self, line: str, events: list) -> None:
        if self._fault is not None:
            if self._fault.take(line):
                return
            events.append(self._fault.crash())
            self._fault = None
        if self._wrapped is not None and self._wrapped_line(line, events):
            return
        if self._tb is not None and self._traceback_line(line, events):
            return
        if self._list is not None and self._list_line(line, events):
            return
        if not any(marker in line for marker in MARKERS):
            return
        self.stats["lines"] += 1
        if line.endswith("Traceback (most recent call last):"):
            self._tb = _Traceback(lines=["Traceback (most recent call last):"])
        elif fault_dump.MARKER in line:
            self._fault = fault_dump.FaultDump(line, self._is_user)
        elif "tasks to connect." in line:
            self._waiting(line, events)
        elif "The following tasks are unhealthy" in line:
            self._list = (Unhealthy, {"tasks": ()}, (line,))
        elif "UNAVAILABLE" in line or "grpc_status:14" in line:
            self._unavailable(line, events)
        elif "Additional GRPC error information from remote target" in line:
            self._remote = (line, parse_task(self._count(line)))
        else:
            self._other(line, events)

    def _count(self, line: str) -> str:
        self.stats["regex"] += 1
        return line

    def _other(self, line: str, events: list) -> None:
        if "Started server with target" in line:
            match = _SERVER.search(self._count(line))
            if match:
                events.append(ServerStarted(address=match.group(1), lines=(line,)))
        elif "Coordination agent has successfully connected" in line:
            events.append(AgentConnected(lines=(line,)))
        elif "has connected to coordination service" in line:
            task = parse_task(self._count(line))
            if task:
                events.append(TaskConnected(task=task, lines=(line,)))
        elif "Failed to add port" in line:
            self._add_port = line
        elif "Could not start gRPC server" in line:
            match = _ADD_PORT.search(self._count(self._add_port)) if self._add_port else None
            address = match.group(1) if match else None
            evidence = (self._add_port, line) if self._add_port else (line,)
            self._once(("bind", address), BindFailure(address=address, lines=evidence), events)
        elif "Attempt to convert a value (PerReplica:" in line:
            self._once(("keras3",), Keras3PerReplica(lines=(line,)), events)
        elif "Your input ran out of data" in line:
            bar = self._count(line[:line.find("Your input ran out of data")])
            match = _PROGRESS.findall(bar)
            step, steps = map(int, match[-1]) if match else (None, None)
            if not _FIRST_PASS.search(bar):
                self._once(("input",), InputExhausted(source="keras", step=step, steps=steps, lines=(line,)), events)
        elif "ollective instance" in line:
            match = _MISMATCH.search(self._count(line))
            if match:
                instance = int(match.group(2) or match.group(3))
                self._once(("mismatch",), CollectiveMismatch(instance=instance, lines=(line,)), events)
        elif "nan" in line or "NaN" in line or "inf" in line:
            match = _NONFINITE.search(self._count(line))
            if match:
                value = "NaN" if match.group(2).lower() == "nan" else "infinite"
                self._once(("nonfinite",), NonFiniteLoss(name=match.group(1), value=value, lines=(line,)), events)

    def _once(self, key, event: Event, events: list) -> None:
        if key not in self._seen:
            self._seen.add(key)
            events.append(event)

    def _waiting(self, line: str, events: list) -> None:
        match = _WAITING.search(self._count(line))
        if match:
            fields = {"waiting": int(match.group(1)), "total": int(match.group(2)), "stragglers": ()}
            events.append(WaitingForPeers(**fields, lines=(line,)))
            self._list = (WaitingForPeers, fields, (line,)) if fields["waiting"] else None

    def _list_line(self, line: str, events: list) -> bool:
        """A line of a straggler or unhealthy list (True), or the line that ends the list (False)."""
        cls, fields, evidence = self._list
        if "Example stragglers:" in line and cls is WaitingForPeers:
            self._list = (cls, fields, evidence + (line,))
            return True
        if line[0] != "/" or _TASK_LINE.fullmatch(self._count(line)) is None:
            self._list = None
            return False
        name = "stragglers" if cls is WaitingForPeers else "tasks"
        fields = {**fields, name: fields[name] + (parse_task(line),)}
        self._list = (cls, fields, evidence + (line,))
        if cls is WaitingForPeers:
            events.append(cls(**fields, lines=evidence + (line,)))
        else:
            self._once(("unhealthy", fields["tasks"]), cls(**fields, lines=evidence + (line,)), events)
        return True

    def _unavailable(self, line: str, events: list) -> None:
        reason = next((r for r in _REASONS if r in line), "unavailable")
        match = _ADDRESS.search(self._count(line))
        address = match.group(1) if match else None
        remote = None
        if line.startswith(":UNKNOWN:"):  # gRPC prints it right after the "remote target" line it belongs to
            remote, self._remote = self._remote, None
        task = remote[1] if remote else None
        evidence = (remote[0], line) if remote else (line,)
        event = PeerUnavailable(reason=reason, task=task, address=address, lines=evidence)
        self._once(("unavailable", reason, task, address), event, events)

    def _traceback_line(self, line: str, events: list) -> bool:
        """A line inside a traceback (True), or its exception line, which ends it (False: look at it too)."""
        tb = self._tb
        if line[0] in " \t":
            if line.startswith('  File "'):
                match = _FRAME.match(self._count(line))
                if match:
                    tb.frames.append(Frame(match.group(1), int(match.group(2)), match.group(3)))
            tb.lines.append(line)
            return True
        if is_runtime_line(line):  # a C++ thread's line printed in the middle: not the exception line
            return True
        self._tb = None
        match = _EXCEPTION.fullmatch(self._count(line))
        exc_type, message = (match.group(1), match.group(2) or "") if match else (line, "")
        frames = tuple(tb.frames)
        user = next((f for f in reversed(frames) if self._is_user(f.file)), None)
        traceback = PythonTraceback(exc_type=exc_type, message=message, frames=frames, user_frame=user,
                                    lines=(*tb.lines, line))
        if wraps(message):  # told once the lines below say what the tf.function raised
            self._wrapped = (traceback, WrappedError(exc_type, message, self._is_user))
        else:
            events.append(traceback)
        if exc_type.endswith("OutOfRangeError") or "End of sequence" in message:
            self._once(("input",), InputExhausted(source="tf.data", lines=(line,)), events)
        return False

    def _wrapped_line(self, line: str, events: list) -> bool:
        """A line below a wrapping traceback: True when it was one of the wrapped error's and nothing more (its
        frames and code, its message's continuation); a runtime line or the line that says it is also read as
        any line is (the scanner's other lines may come in between: gRPC's details after an op's message)."""
        _, reader = self._wrapped
        if is_runtime_line(line):
            return False
        if not reader.take(line):
            self._unwrap(events)
            return False
        if reader.done:
            self._unwrap(events)
            return False
        return True

    def _unwrap(self, events: list) -> None:
        traceback, reader = self._wrapped
        self._wrapped = None
        raised = reader.raised()
        if raised is not None:
            traceback = dataclasses.replace(traceback, raised=raised, lines=(*traceback.lines, "", *reader.lines))
        events.append(traceback)

    def _is_user(self, path: str) -> bool:
        path = os.path.normpath(path)
        return path in self._user_abs or path.endswith(self._user_rel)


def scan(text: str, user_files=()) -> list[Event]:
    """The events of a whole log."""
    scanner = TfLogScanner(user_files)
    return scanner.feed(text) + scanner.close()
