"""Curves from TensorBoard event files, so a training script that prints nothing still gets curves.

What the tasks write with `tf.summary` or the Keras TensorBoard callback is read incrementally with
TensorBoard's own `EventAccumulator`, one per event file: `Reload()` reads only the bytes added since
the last one, and what it read is then dropped from the accumulator, so memory stays flat.

Which files: `events.out.tfevents.*` modified since the run started (an earlier run's files in the
same folder are never read), written by the run's own processes where those are known (`writers`: a local
run's; TF2 names a file after its writer's host and pid), under the roots (the run folder, the tasks' working directory, an
explicit logdir), at most MAX_DEPTH folders down, outside hidden folders and outside `workertemp_*`:
under MultiWorkerMirroredStrategy tf-keras makes every non-chief worker write there, and deletes it at
the end, so the chief's files are the ones read.

Tags to rows (only scalar summaries; TF2 stores them as tensors, TF1 and others as simple values):
- `epoch_X` gives per-epoch rows: X at epoch = the summary's step, 0-based like Keras's History
  (the Keras callback writes `epoch_loss` with step=epoch);
- every other tag gives per-step rows: X at the summary's step. The Keras callback's `batch_X`
  (with update_freq) becomes X, scaled by `batch_scale`: under MultiWorkerMirroredStrategy
  tf-keras sums these running values over the replicas, as it does in the progress bar;
- in a folder named `validation` (the Keras callback's) X becomes `val_X`;
- the Keras callback's `evaluation_X_vs_iterations` repeats the validation epoch values: skipped.
Per folder and metric a point is taken only when its step is past the last one taken, so workers
writing into one folder give one curve, and a restarted writer continues it. A step row's epoch is
the first epoch that ended (by the summaries' wall time) after it, else the epoch in progress.
"""
from __future__ import annotations

import bisect
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .tensorboard_import import reader_ready

SCAN_SECONDS = 2.0  # looking for new event files walks folders; reading known ones is one stat each
MAX_DEPTH = 4  # logs/fit/20240101-120000/train: the deepest layout the tutorials use
MAX_FOLDERS = 2000  # per root and scan, so a working directory full of data cannot stall the supervisor
MTIME_SLACK = 0.02  # file times come from a coarse clock, up to a jiffy (4-10 ms) behind time.time()
SKIPPED_FOLDERS = ("__pycache__", "node_modules", "site-packages")
EVENTS_MARK = "tfevents"  # TensorBoard's own test for an event file name
KEEP_EARLY_STEPS = 100_000  # steps kept to work out steps per epoch (needs the first epoch's)


@dataclass
class Point:
    folder: str
    kind: str  # "epoch", "batch" (Keras's per-batch) or "step"
    name: str
    step: int
    wall: float
    value: float


def metric_of(folder_name: str, tag: str) -> tuple[str, str] | None:
    """(kind, row key) for a scalar tag in a folder, or None for tags that are not curves of their own."""
    if tag.endswith("_vs_iterations"):
        return None
    kind, name = "step", tag
    for prefix, prefixed in (("epoch_", "epoch"), ("batch_", "batch")):
        if tag.startswith(prefix) and len(tag) > len(prefix):
            kind, name = prefixed, tag[len(prefix):]
    if folder_name == "validation" and not name.startswith("val_"):
        name = "val_" + name
    return kind, name


def event_files(roots, since: float) -> list[Path]:
    """Event files under the roots modified since `since`, each once, in name (= creation) order per folder."""
    found: dict[str, Path] = {}
    for root in roots:
        if root is None:
            continue
        for path in _walk(Path(root)):
            try:
                fresh = path.stat().st_mtime >= since - MTIME_SLACK
            except OSError:
                continue
            if fresh:
                found.setdefault(os.path.realpath(path), path)
    return sorted(found.values(), key=lambda p: (str(p.parent), p.name))


def writer_of(path: Path) -> tuple[str, int] | None:
    """(host, pid) of the process that wrote an event file, as TF2's summary writer names it
    (events.out.tfevents.SECONDS.HOST.PID.COUNTER.v2, the host's name may hold dots); None where the name says
    no pid (TF1's, other writers')."""
    parts = path.name.split(".")
    if len(parts) < 8 or parts[-1] != "v2" or not parts[-3].isdigit() or not parts[-2].isdigit():
        return None
    return ".".join(parts[4:-3]), int(parts[-3])


def event_folders(roots, since: float) -> list[Path]:
    """The folders holding such files (what TensorBoard calls runs)."""
    return sorted({path.parent for path in event_files(roots, since)})


def _walk(root: Path):
    """Event files at most MAX_DEPTH folders below root, breadth first, skipping what cannot hold the run's logs."""
    level, visited = [root], 0
    for _depth in range(MAX_DEPTH + 1):
        deeper = []
        for folder in level:
            visited += 1
            if visited > MAX_FOLDERS:
                return
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            if not _skipped(entry.name):
                                deeper.append(Path(entry.path))
                        elif EVENTS_MARK in entry.name:
                            yield Path(entry.path)
            except OSError:  # gone or unreadable: its files are not ours to read
                continue
        level = deeper


def _skipped(name: str) -> bool:
    return name.startswith((".", "workertemp_")) or name in SKIPPED_FOLDERS


class _EventFile:
    """One event file, its size when last read, and the accumulator that reads what was added."""

    def __init__(self, path: Path):
        self.path = path
        self.folder = str(path.parent)
        self.size = -1
        self._accumulator = None
        self._kinds: dict[str, tuple[str, str] | None] = {}  # tag -> metric_of(...), decided once

    def read_new(self) -> list[Point] | None:
        """New points, [] when the file has not grown, None when it is gone (once the reader is imported)."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return None
        if size == self.size:
            return []
        self.size = size
        accumulator = self._accumulator or self._open()
        accumulator.Reload()
        points = self._points(accumulator)
        for reservoir in (accumulator.scalars, accumulator.tensors):  # read once: dropped, so memory stays flat
            reservoir.FilterItems(lambda _: False)
        return points

    def _open(self):
        from tensorboard.backend.event_processing import event_accumulator as ea

        keep_all = {ea.SCALARS: 0, ea.TENSORS: 0}  # 0 keeps every point; the default samples 10,000
        self._accumulator = ea.EventAccumulator(str(self.path), size_guidance=keep_all, purge_orphaned_data=False)
        return self._accumulator

    def _points(self, accumulator) -> list[Point]:
        from tensorboard.util import tensor_util

        points, tags = [], accumulator.Tags()
        for tag in tags["scalars"]:
            if kind := self._kind(tag):
                points += [Point(self.folder, *kind, e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]
        for tag in tags["tensors"]:
            if accumulator.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
                continue  # histograms, images, text, the Keras model's graph
            if kind := self._kind(tag):
                for event in accumulator.Tensors(tag):
                    value = tensor_util.make_ndarray(event.tensor_proto)
                    if value.size == 1:
                        points.append(Point(self.folder, *kind, event.step, event.wall_time, float(value.reshape(()))))
        return points

    def _kind(self, tag: str) -> tuple[str, str] | None:
        if tag not in self._kinds:
            self._kinds[tag] = metric_of(os.path.basename(self.folder), tag)
        return self._kinds[tag]


class TensorBoardScalars:
    """A run's TensorBoard scalars as kwnb's epoch and step rows; `poll()` returns only new rows.

    Cheap enough to call on every supervisor tick: folders are walked at most every SCAN_SECONDS,
    and a known file costs one stat unless it grew. The first file found imports TensorBoard's
    reader, which imports TensorFlow if this process has not yet (once: 2.5 s of CPU and 600 MB
    here; see use_tensorflow_stub for processes that run no TensorFlow of their own), in a thread
    of its own where the poll does not wait (tensorboard_import.py).
    """

    def __init__(self, roots, since: float, batch_scale: float = 1.0, writers: Callable[[], set[int]] | None = None):
        """`writers`: where the tasks run on this machine, the pids that may write the run's event files (the
        tasks' processes and their children): a file this machine's other process wrote since the run started
        (another notebook's run in the same folder) is not the run's. None: any writer (a scheduler's nodes)."""
        self.roots = [Path(root) for root in roots if root]
        self.writers = writers
        self.since = since
        self.batch_scale = batch_scale
        self.steps_per_epoch: int | None = None  # worked out from the first epoch's step summaries
        self.unavailable = ""  # why nothing can be read (TensorBoard missing), once found out
        self.unreadable: dict[Path, str] = {}  # files given up on, and why
        self._files: dict[Path, _EventFile] = {}
        self._foreign: set[Path] = set()  # files another process of this machine wrote: never the run's
        self._scanned_at = -math.inf
        self._last_step: dict[tuple, int] = {}  # (folder, per epoch?, row key) -> last step taken
        self._epoch_ends: dict[int, float] = {}  # epoch -> wall time of its first end-of-epoch summary
        self._early_steps: list[tuple[float, int]] = []  # (wall, step) until steps_per_epoch is known
        self._failed = False
        self._said: set[str] = set()  # problems already turned into notes

    def poll_safely(self, say: Callable[[str], None], rescan: bool = False) -> tuple[list[dict], list[dict]]:
        """poll(), but a failure is a note and the end of reading: curves are a bonus, and a bad
        event file must not stop the run's supervisor. `say` gets each note once: why event files
        cannot be read at all (no TensorBoard), each file given up on, a failure of the reader itself."""
        if self._failed:
            return [], []
        try:
            rows = self.poll(rescan=rescan, wait=rescan)
        except Exception as error:  # a bug in the reader: the run goes on without curves from event files
            say(f"stopped reading TensorBoard event files: {type(error).__name__}: {error}")
            self._failed = True
            return [], []
        for problem in self._new_problems():
            say(problem)
        return rows

    def _new_problems(self) -> list[str]:
        problems = [f"{self.unavailable} (no curves from event files; `pip install tensorboard` adds them)"] \
            if self.unavailable else []
        problems += [f"could not read the TensorBoard event file {path}: {why}" for path, why in self.unreadable.items()]
        new = [problem for problem in problems if problem not in self._said]
        self._said.update(new)
        return new

    def poll(self, rescan: bool = False, wait: bool = True) -> tuple[list[dict], list[dict]]:
        """(epoch rows, step rows) read since the last poll. `rescan=True` looks for new files now
        (the last poll, when the tasks have ended) rather than at most every SCAN_SECONDS. `wait=False`: while
        TensorBoard's reader is being imported (tensorboard_import.py), nothing yet; the files are read after."""
        if self.unavailable:
            return [], []
        if rescan or time.monotonic() - self._scanned_at >= SCAN_SECONDS:
            self._scanned_at = time.monotonic()
            for path in event_files(self.roots, self.since):
                if path in self.unreadable or path in self._files or path in self._foreign:
                    continue
                if self._written_by_the_run(path):
                    self._files[path] = _EventFile(path)
                else:
                    self._foreign.add(path)
        try:
            if self._files and not reader_ready(wait):
                return [], []
        except ImportError as error:
            self.unavailable = f"cannot read TensorBoard event files: {error}"
            return [], []
        points: list[Point] = []
        for path, events in list(self._files.items()):
            try:
                new = events.read_new()
            except Exception as error:  # a file TensorBoard cannot parse must not stop the supervisor
                self.unreadable[path] = f"{type(error).__name__}: {error}"
                new = None
            if new is None:
                del self._files[path]
            else:
                points += new
        return self._rows(points) if points else ([], [])

    def _written_by_the_run(self, path: Path) -> bool:
        """A new file's writer is one of the run's processes, or cannot be told (`writers` is asked only then)."""
        writer = writer_of(path) if self.writers else None
        return writer is None or writer[0] != socket.gethostname() or writer[1] in self.writers()

    def _rows(self, points: list[Point]) -> tuple[list[dict], list[dict]]:
        points.sort(key=lambda p: (p.step, p.wall))
        epochs: dict[int, dict] = {}
        for point in points:
            if point.kind == "epoch" and self._take(point):
                epochs.setdefault(point.step, {"epoch": point.step})[point.name] = point.value
                self._epoch_ends[point.step] = min(self._epoch_ends.get(point.step, math.inf), point.wall)
        ends = sorted((wall, epoch) for epoch, wall in self._epoch_ends.items())
        steps: dict[int, dict] = {}
        for point in points:
            if point.kind != "epoch" and self._take(point):
                value = point.value * self.batch_scale if point.kind == "batch" else point.value
                row = steps.setdefault(point.step, {"epoch": _epoch_at(ends, point.wall), "step": point.step})
                row[point.name] = value
                if self.steps_per_epoch is None and len(self._early_steps) < KEEP_EARLY_STEPS:
                    self._early_steps.append((point.wall, point.step))
        if self.steps_per_epoch is None and ends:
            self._infer_steps_per_epoch(ends[0][0])
        return [epochs[e] for e in sorted(epochs)], [steps[s] for s in sorted(steps)]

    def _take(self, point: Point) -> bool:
        key = (point.folder, point.kind == "epoch", point.name)
        if key in self._last_step and point.step <= self._last_step[key]:
            return False  # another writer's copy of this point, or a restarted writer catching up
        self._last_step[key] = point.step
        return True

    def _infer_steps_per_epoch(self, first_end: float) -> None:
        """Steps in the first epoch that ended: last - first + the spacing between logged steps.

        Right whether steps count from 0 or 1 and whether every step or every Nth one was logged;
        the dashboard needs it to place step rows on the epoch axis."""
        steps = sorted({step for wall, step in self._early_steps if wall <= first_end})
        if len(steps) >= 2:
            spacing = min(b - a for a, b in zip(steps, steps[1:]))
            self.steps_per_epoch = steps[-1] - steps[0] + spacing
            self._early_steps = []


def _epoch_at(ends: list[tuple[float, int]], wall: float) -> int:
    """The first epoch that ended at or after `wall`; else the one after the last ended (0 before any)."""
    index = bisect.bisect_left(ends, (wall, -1))
    if index < len(ends):
        return ends[index][1]
    return max(epoch for _, epoch in ends) + 1 if ends else 0
