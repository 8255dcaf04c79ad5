"""Past runs, read back from their folders: `kwnb.open_run(path_or_name)` and the list `%kw_runs` shows.

A PastRun gives the same RunSnapshot (engine/records/snapshot.py) as a live run, so the dashboard, the
summary and the timeline show it with the same renderers. What it reads, and what it says when a
part is missing (an older kwnb, a deleted file, a kernel that ended before the run did):

    run.json      what was launched and, under "result" (engine/records/record.py), how it went
    history.json  the metric rows and each task's last lines; without them (an older kwnb, a kernel gone
                  first) they are read from the logs and kwnb.report() rows, once, by the live run's reader
    <task>.screen `logs()`: every line the live run's reader kept, as shown and marked (engine/readers/output.py)
    <task>.log    only that it is there: its bytes are read only where neither of the above was kept

A folder that cannot be read at all (no run.json, a truncated one, one from a newer kwnb) raises
UnreadableRun, whose message is the one line to show.
"""
from __future__ import annotations

import codecs
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from ...errors import KwnbError
from ...task.runfolder import (DESCRIPTION, HISTORY, RUN_JSON_FORMAT, RunFolder, default_runs_dir, find_run_dir,
                               launch_order, read_description, read_kept)
from ...task.tf_config import TaskId
from ..diagnoses.diagnosis import Diagnosis
from ..readers.metrics import MetricsParser
from ..tasks.roles import chief_position
from .reading import RunReading
from ..readers.output import TaskOutput
from .snapshot import LOG_LINES, RunSnapshot, TaskView
from .summary import format_summary

READ_CHUNK = 1 << 20  # logs are read in 1 MiB pieces: memory stays flat whatever their size


class UnreadableRun(KwnbError, ValueError):
    """A run folder kwnb cannot show; the message says why in one line."""


class PastRun(RunReading):
    """A finished run read from its folder: read-only, shown in a notebook as its final dashboard."""

    def __init__(self, path: str | os.PathLike):
        self.dir = Path(path)
        self.folder = RunFolder(self.dir)
        data = _load_json(self.folder.description)
        if not isinstance(data, dict):
            raise UnreadableRun(f"cannot read {self.folder.description}: it is not a JSON object")
        version = _format(data, f"{self.dir} was written by a newer kwnb (run.json format {{}}; this kwnb reads "
                                f"formats up to {RUN_JSON_FORMAT}): upgrade kwnb to open it")
        try:
            description = read_description(self.dir)
        except KwnbError as error:
            raise UnreadableRun(str(error)) from None
        self.name, self.created = description.name, data.get("created", "")
        self.missing: list[str] = []
        try:
            self._snapshot = self._read(description, data.get("result"), version)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            raise UnreadableRun(f"cannot read how the run in {self.dir} went: run.json's 'result' is not what "
                                f"kwnb writes ({type(error).__name__}: {error})") from None
        self.workers = list(self._snapshot.tasks)

    # ----- reading the folder ---------------------------------------------------------------------
    def _read(self, description, result: dict | None, version: int) -> RunSnapshot:
        if result is None:
            self.missing.append("how the run ended (status, exit codes, phases, diagnoses): " + (
                "the run is still going elsewhere, or what ran it ended before it did" if version >= 2 else
                "an older kwnb wrote this folder"))
            result = {"status": "unknown", "tasks": []}
        kept = read_kept(RunSnapshot, result)
        recorded = {task.id: task for task in kept.tasks}
        rows = self._rows(description.tasks)
        chief = chief_position([TaskId(kind, index) for kind, index in description.tasks])  # as the live run's
        tasks = tuple(self._task(TaskId(kind, index), recorded.get(TaskId(kind, index)) or
                                 read_kept(TaskView, {"type": kind, "index": index}), position, rows[position],
                                 position == chief)
                      for position, (kind, index) in enumerate(description.tasks))
        shown = {**vars(kept), "tasks": tasks, "diagnoses": tuple(Diagnosis(**vars(d)) for d in kept.diagnoses),
                 "diagnosis_history": tuple(Diagnosis(**vars(d)) for d in kept.diagnosis_history)}
        return RunSnapshot(**shown, name=self.name, dir=self.dir, done=True, past=True, missing=tuple(self.missing),
                           taken_at=time.time())

    def _task(self, task_id: TaskId, kept: SimpleNamespace, position: int, rows: tuple, chief: bool) -> TaskView:
        """What run.json kept of the task (TaskView's fields tagged `kept`), with its lines counted in its log and
        its metric rows (`rows`: history.json's fields and, where they were parsed again, the progress they give)."""
        log_path = self.folder.log(task_id.type, task_id.index)
        history, parsed_progress = rows
        tail, tail_runtime, total, runtime = self._log_tail(log_path, history, kept)
        shown = {**vars(kept), **vars(history), "position": position, "total_lines": total, "runtime_lines": runtime,
                 "is_chief": chief if kept.is_chief is None else kept.is_chief, "id": task_id,
                 "progress": kept.progress or parsed_progress or (None, ""), "tail": tail, "tail_runtime": tail_runtime}
        return TaskView(**shown, alive=False, log_path=log_path)

    def _rows(self, task_ids: list) -> list[tuple]:
        """Each task's rows (TaskView's fields history.json keeps) and, where they were parsed again, its progress:
        history.json, else the logs and kwnb.report() rows read again."""
        path = self.folder.path / HISTORY
        try:
            tasks = json.loads(path.read_text(encoding="utf-8"))["tasks"]
            if len(tasks) == len(task_ids):
                return [(read_kept(TaskView, task, HISTORY), None) for task in tasks]
            why = "it lists other tasks"
        except FileNotFoundError:
            why = "no such file"
        except (OSError, ValueError, KeyError, TypeError) as error:
            why = f"unreadable: {error}"
        self.missing.append(f"{HISTORY} ({why}): the curves were read again from the logs and kwnb.report() rows")
        return [self._parse_rows(position, kind, index) for position, (kind, index) in enumerate(task_ids)]

    def _parse_rows(self, position: int, kind: str, index: int) -> tuple:
        parser = MetricsParser()
        for path, feed in ((self.folder.log(kind, index), parser.feed),
                           (self.folder.metrics(position), parser.feed_report_lines)):
            for chunk in _chunks(path):
                feed(chunk)
        rows = {"epochs": parser.history(), "steps": parser.steps, "steps_per_epoch": parser.steps_per_epoch}
        return read_kept(TaskView, rows, HISTORY), parser.progress()  # no tail kept: the log is read again

    def _log_tail(self, path: Path, rows: SimpleNamespace, kept: SimpleNamespace) -> tuple[tuple, tuple, int, int]:
        """The log's last lines as a terminal shows them and which are runtime lines (their places among them), how
        many lines in all, how many runtime lines: as the run recorded them, else (a folder an older kwnb wrote,
        or a run that never ended here) the log read again by the reader the live run had."""
        if not path.is_file():
            self.missing.append(f"{path.name} (deleted?)")
            return (), (), 0, 0
        if rows.tail is not None:  # recorded at the run's end (history.json), its counts beside it in run.json
            return rows.tail, rows.tail_runtime, kept.total_lines, kept.runtime_lines
        output = TaskOutput(path, keep=LOG_LINES)
        output.feed_file()
        return (*output.tail(), output.total_lines, output.runtime_lines)

    # ----- what a Run also answers --------------------------------------------------------------
    def snapshot(self) -> RunSnapshot:
        return self._snapshot

    @property
    def tasks(self) -> list[TaskView]:
        return self.workers

    @property
    def done(self) -> bool:
        return True

    @property
    def status(self) -> str:
        return self._snapshot.status

    @property
    def exit_codes(self) -> list[int | None]:
        return self._snapshot.exit_codes

    @property
    def diagnoses(self) -> list[Diagnosis]:
        return list(self._snapshot.diagnoses)

    @property
    def diagnosis_history(self) -> list[Diagnosis]:
        return list(self._snapshot.diagnosis_history)

    @property
    def reason(self) -> str:
        return self._snapshot.reason

    @property
    def notes(self) -> list[str]:
        return list(self._snapshot.notes)

    @property
    def started_at(self) -> float | None:
        return self._snapshot.started_at

    @property
    def ended_at(self) -> float | None:
        return self._snapshot.ended_at

    @property
    def elapsed(self) -> float:
        return self._snapshot.elapsed

    @property
    def curves_path(self) -> Path | None:
        return self._snapshot.curves_path

    def history(self, task: int | str = 0, *, index: int | None = None) -> list[dict]:
        return self._snapshot.history(self.task(task if index is None else index).position)

    def step_history(self, task: int | str = 0, *, index: int | None = None) -> list[dict]:
        return self._snapshot.step_history(self.task(task if index is None else index).position)

    def summary(self) -> str:
        return format_summary(self._snapshot)

    def __repr__(self) -> str:
        return f"<kwnb past run {self.name!r} {self.status}, {len(self.workers)} tasks, {self.dir}>"


def open_run(ref: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> PastRun:
    """A finished run from its folder (a path) or its name (its newest folder in .kwnb/runs or $KWNB_RUNS_DIR)."""
    try:
        return PastRun(find_run_dir(ref, runs_dir))
    except UnreadableRun:
        raise
    except KwnbError as error:
        raise UnreadableRun(str(error)) from None


@dataclass(frozen=True)
class RunListing:
    """One line of `%kw_runs`: a run folder, read or not."""

    folder: Path
    name: str
    started: float  # for sorting, newest first: the run's start, else the folder's time
    status: str = ""
    tasks: int = 0
    duration: float | None = None
    problem: str = ""  # why the folder cannot be read, in one line


def list_runs(runs_dir: str | os.PathLike | None = None, newest_per_name: bool = True) -> list[RunListing]:
    """Run folders, newest first; by default only the newest of each name (what `%kw_show NAME` opens)."""
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    listings = sorted((_listing(folder) for folder in base.iterdir() if folder.is_dir()) if base.is_dir() else [],
                      key=lambda listing: listing.started, reverse=True)
    if not newest_per_name:
        return listings
    newest: dict[str, RunListing] = {}  # by the order find_run_dir opens a name in, not by start
    for listing in listings:
        kept = newest.get(listing.name)
        if kept is None or _launch_order(listing) > _launch_order(kept):
            newest[listing.name] = listing
    return [listing for listing in listings if newest[listing.name] is listing]


def no_runs_line(runs_dir: str | os.PathLike | None = None) -> str:
    """What `%kw_runs` and `kwnb runs` say when there is nothing to list: where they looked."""
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    return f"kwnb: no run folder in {base} (runs are kept in .kwnb/runs of the working directory, or $KWNB_RUNS_DIR)"


def listing_line(listing: RunListing) -> str:
    """One run folder as `%kw_runs` and `kwnb runs` list it: name, when, status, tasks, duration, folder."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(listing.started)) if listing.started else "?"
    if listing.problem:
        return f"{listing.folder.name:<16} {when}  unreadable: {listing.problem}"
    duration = "-" if listing.duration is None else f"{listing.duration:.1f} s"
    return (f"{listing.name:<16} {when}  {listing.status:<9} {listing.tasks} task{'s' * (listing.tasks != 1)}  "
            f"{duration:>9}  {listing.folder}")


def _listing(folder: Path) -> RunListing:
    """Reads run.json only (not the logs): listing many runs stays quick."""
    try:
        data = _load_json(folder / DESCRIPTION)
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(data.get("tasks"), list):
            raise UnreadableRun(f"{DESCRIPTION} is not what kwnb writes")
        _format(data, "written by a newer kwnb (format {})")
        result = data.get("result") or {}
        started = result.get("started_at") or _created(data) or folder.stat().st_mtime
        ended = result.get("ended_at")
        return RunListing(folder, data["name"], started, result.get("status", "unknown"), len(data["tasks"]),
                          ended - started if ended and result.get("started_at") else None)
    except (UnreadableRun, TypeError, AttributeError) as error:
        return RunListing(folder, folder.name, _mtime(folder), problem=str(error) or type(error).__name__)


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnreadableRun(f"{path.parent} is not a kwnb run folder (any more): it has no {path.name}") from None
    except ValueError as error:
        raise UnreadableRun(f"cannot read {path}: it is cut short or not JSON ({error})") from None
    except OSError as error:
        raise UnreadableRun(f"cannot read {path}: {error.strerror or error}") from None


def _chunks(path: Path):
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character cut between two chunks
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(READ_CHUNK):
                yield decoder.decode(chunk)
    except FileNotFoundError:
        return


def _format(data: dict, newer: str) -> int:
    """run.json's format, checked: `newer` (with {} for the number) says a later kwnb wrote it."""
    version = data.get("format", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise UnreadableRun(f"{DESCRIPTION}'s format is {version!r}, not a number kwnb writes")
    if version > RUN_JSON_FORMAT:
        raise UnreadableRun(newer.format(version))
    return version


def _created(data: dict) -> float | None:
    """When run.json was written (its "created", kept by every format): the start of a run with no result."""
    try:
        return datetime.strptime(data["created"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def _launch_order(listing: RunListing) -> tuple:
    try:
        return launch_order(listing.folder, listing.name)
    except OSError:  # the folder went away meanwhile
        return (-1,)


def _mtime(folder: Path) -> float:
    try:
        return folder.stat().st_mtime
    except OSError:
        return 0.0

