"""The run folder: every file a run keeps, every variable that tells a task where they are, and run.json.

The folder is the contract between the engine (which creates and follows it) and the tasks (which
write their logs, reports and, under Slurm, their TF_CONFIG and exit codes into it), so its names are
spelled here only, in standard-library code both sides can import.

    .kwnb/runs/NAME-YYYYmmdd-HHMMSS[-K]/
        run.json                 what was launched (RunDescription): export or launch it again later;
                                 at the end, how it went ("result": engine/records/record.py, read by engine/records/past.py)
        history.json             the metric rows at the end (epochs and steps of each task) and the log tails
        main.py, helpers.py      copies of the script and the %%kw_file modules, as they were
        <type>-<index>.log       each task's stdout and stderr, appended across restarts
        <type>-<index>.screen    the same as a terminal shows it, a line a line after a mark (engine/readers/output.py)
        metrics-<position>.jsonl rows from kwnb.report()
        stacks-<position>.txt    Python stacks the task dumps on STACKS_SIGNAL (faulthandler)
        tf-config-<position>.json  the TF_CONFIG the script set itself, if it did
        summary.txt, curves.png, timeline.png  written by the views when the run ends
        job.sh, slurm-<job>.out, slurm-task-<position>.json, slurm-exit-<position>, slurm-heartbeat  (Slurm)
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ..errors import OptionError
from .tf_config import TASK_TYPES

# Set in every task's environment by the engine.
RUN_DIR_ENV = "KWNB_RUN_DIR"
POSITION_ENV = "KWNB_WORKER"  # the task's position in the run (0 is the chief): kwnb.report writes there
PARENT_PID_ENV = "KWNB_PARENT_PID"  # the watchdog ends the task when this process is gone
# Set for a Slurm job (kwnb/task/slurm_env.py reads them on the node).
SLURM_TASKS_ENV = "KWNB_SLURM_TASKS"  # JSON list, in kwnb's order: [{"type", "index", "log"}, ...]
SLURM_PORT_BASE_ENV = "KWNB_SLURM_PORT_BASE"
SLURM_HEARTBEAT_ENV = "KWNB_SLURM_HEARTBEAT"  # a file the engine touches every second while it follows the job
SLURM_HEARTBEAT_STALE_ENV = "KWNB_SLURM_HEARTBEAT_STALE"  # seconds; tests shorten it
# The task dumps every thread's Python stack to its stacks file on this signal (SIGUSR2: neither
# Python nor TensorFlow uses it). Sent only once that file exists: before the bootstrap registers
# the handler, SIGUSR2 would end the task.
STACKS_SIGNAL_NAME = "SIGUSR2"

RUNS_DIR_ENV = "KWNB_RUNS_DIR"
# What a task writes into the run folder itself, by the start of the file's name: a file that only grows, or one
# rewritten whole. A backend whose nodes do not share the folder copies these back (backends/ray.py).
TASK_FILES = {"metrics-": "grows", "stacks-": "grows", "tf-config-": "rewritten"}


def grows(name: str) -> bool:
    """Whether the task file `name` only grows (a copy takes what it has not had), else it is rewritten whole."""
    return any(name.startswith(start) and how == "grows" for start, how in TASK_FILES.items())
DESCRIPTION = "run.json"
HISTORY = "history.json"  # the metric rows and log tails at the end, apart: %kw_runs reads every run.json
# run.json's "format": 1 (no key) what was launched; 2 adds "result" when the run ends (engine/records/record.py).
RUN_JSON_FORMAT = 2
SUMMARY = "summary.txt"
CURVES = "curves.png"
TIMELINE = "timeline.png"
_STAMP = "%Y%m%d-%H%M%S"
_FOLDER_SUFFIX = re.compile(r"(\d{8}-\d{6})(?:-(\d+))?")  # after "NAME-": the stamp, and -K for a busy second


class RunFolder:
    """Paths inside one run folder."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def log(self, task_type: str, index: int) -> Path:
        return self.path / f"{task_type}-{index}.log"

    def screen(self, task_type: str, index: int) -> Path:
        return self.path / f"{task_type}-{index}.screen"

    def metrics(self, position: int) -> Path:
        return self.path / f"metrics-{position}.jsonl"

    def stacks(self, position: int | str) -> Path:
        return self.path / f"stacks-{position}.txt"

    def tf_config_set(self, position: int | str) -> Path:
        return self.path / f"tf-config-{position}.json"

    def read_tf_config_set(self, position: int | str) -> dict | None:
        """The record a task's script left when it set TF_CONFIG itself (task/bootstrap.py), or None."""
        try:
            return json.loads(self.tf_config_set(position).read_text())
        except (OSError, ValueError):
            return None

    @property
    def description(self) -> Path:
        return self.path / DESCRIPTION

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def curves(self) -> Path:
        return self.path / CURVES

    @property
    def timeline(self) -> Path:
        return self.path / TIMELINE

    # Slurm: the tasks record where they run and how they ended, since only they know.
    @property
    def job_script(self) -> Path:
        return self.path / "job.sh"

    @property
    def heartbeat(self) -> Path:
        return self.path / "slurm-heartbeat"

    def slurm_output(self, job_id: str = "%j") -> Path:
        """sbatch's --output (with %j, Slurm's placeholder for the job id) or one job's output."""
        return self.path / f"slurm-{job_id}.out"

    def slurm_task(self, position: int | str) -> Path:
        return self.path / f"slurm-task-{position}.json"

    def slurm_exit(self, position: int | str) -> Path:
        return self.path / f"slurm-exit-{position}"

    def clear_slurm_records(self) -> None:
        """A relaunch must not read the last attempt's placements or exit codes."""
        for stale in [*self.path.glob("slurm-exit-*"), *self.path.glob("slurm-task-*.json")]:
            stale.unlink()


def default_runs_dir(cwd: str | os.PathLike | None = None) -> Path:
    """Where runs are kept: $KWNB_RUNS_DIR, else .kwnb/runs of the working directory."""
    return Path(os.environ.get(RUNS_DIR_ENV) or Path(cwd or os.getcwd()) / ".kwnb" / "runs")


def new_run_dir(runs_dir: Path, name: str) -> Path:
    """NAME-YYYYmmdd-HHMMSS, with -K added when one second sees several launches; private (0700)."""
    runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime(_STAMP)
    for attempt in range(1000):
        path = runs_dir / (f"{name}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise OptionError(f"could not create a run folder in {runs_dir}")


def launch_order(folder: Path, name: str) -> tuple:
    """A sort key: folders of run NAME in the order they were created (by name, else by time)."""
    stamp = _FOLDER_SUFFIX.fullmatch(folder.name[len(name) + 1:])
    if stamp:
        return 1, stamp.group(1), int(stamp.group(2) or 0)
    return 0, "", folder.stat().st_mtime


# ----- run.json ---------------------------------------------------------------------------------------
# What run.json (and history.json) keep is declared where the values are defined: a dataclass field tagged
# with `kept(...)` (TaskView, RunSnapshot, Diagnosis in the engine; RunDescription here). Writing
# (`kept_of`) and reading (`read_kept`) walk those tags, so a new fact kept is one tagged field.
KEPT = "kept"  # the metadata key: which file keeps the field
REQUIRED = dataclasses.MISSING  # kept(missing=REQUIRED): every kwnb that wrote the record wrote this field
_AS_DEFAULT = object()


def kept(default=dataclasses.MISSING, *, into: str = DESCRIPTION, missing=_AS_DEFAULT, read=None,
         write=None, each: type | None = None, flat: type | None = None, check=None, **options) -> dataclasses.Field:
    """A dataclass field that `into` (run.json or history.json) keeps. `missing`: what reading gives when a
    folder lacks it (an older kwnb wrote it; default: the field's default, else it is required); `read` and
    `write` turn JSON's value back and forth (a list into a tuple); `each`: the kept type of every item of a
    list; `flat`: a dataclass kept as its fields, side by side with the record's (a task's type and index);
    `check(value)`: what a value read must be ("be a string") when it is not what kwnb writes, else None."""
    if missing is _AS_DEFAULT:
        missing = default
    if isinstance(default, (list, dict)):  # an empty one: a fresh one for each value, as dataclasses want
        options["default_factory"], default = type(default), dataclasses.MISSING
    metadata = {KEPT: into, "missing": missing, "read": read, "write": write, "each": each, "flat": flat,
                "check": check}
    return dataclasses.field(default=default, metadata=metadata, **options)


def kept_fields(kind: type, into: str) -> list[dataclasses.Field]:
    return [item for item in dataclasses.fields(kind) if item.metadata.get(KEPT) == into]


def kept_of(value, into: str = DESCRIPTION) -> dict:
    """What `into` keeps of `value` (a dataclass whose fields are tagged with `kept`), as JSON's values."""
    record = {}
    for item in kept_fields(type(value), into):
        one, meta = getattr(value, item.name), item.metadata
        if meta["flat"]:
            record.update(dataclasses.asdict(one))
        elif meta["each"]:
            record[item.name] = [kept_of(each, into) for each in one]
        else:
            record[item.name] = meta["write"](one) if meta["write"] else one
    return record


def read_kept(kind: type, data, into: str = DESCRIPTION) -> SimpleNamespace:
    """The values of `kind`'s fields that `into` keeps, as attributes of their names, from what kept_of wrote;
    a field `data` lacks takes its `missing` value, and a required one (every kwnb wrote it) raises KeyError."""
    if not isinstance(data, dict):
        raise TypeError(f"{kind.__name__} is {type(data).__name__}, not an object")
    values = {}
    for item in kept_fields(kind, into):
        meta = item.metadata
        if meta["flat"]:
            parts = dataclasses.fields(meta["flat"])
            values[item.name] = meta["flat"](**{part.name: data[part.name] for part in parts})
        elif item.name not in data:
            if meta["missing"] is dataclasses.MISSING:
                problem = meta["check"] and meta["check"](None)
                raise ValueError(f"{item.name!r} must {problem}") if problem else KeyError(item.name)
            missing = meta["missing"]
            values[item.name] = type(missing)(missing) if isinstance(missing, (list, dict)) else missing  # a fresh one
        else:
            values[item.name] = _read_value(meta, data[item.name], item.name, into)
    return SimpleNamespace(**values)


def _read_value(meta, value, name: str, into: str):
    problem = meta["check"] and meta["check"](value)
    if problem:
        raise ValueError(f"{name!r} must {problem}")
    if meta["each"]:
        return tuple(read_kept(meta["each"], one, into) for one in value)
    return meta["read"](value) if meta["read"] else value


def _is(kind: type, what: str, items: type | None = None):
    """A check: a `kind` (of `items`: a list's, or a mapping's keys and values), else "be `what`"."""
    def check(value):
        parts = [] if not isinstance(value, kind) else [*value, *value.values()] if kind is dict else value
        if not isinstance(value, kind) or items and not all(isinstance(part, items) for part in parts):
            return f"be {what}"
    return check


def _task_list(value):
    if not isinstance(value, list) or not value or not all(
            isinstance(t, dict) and t.get("type") in TASK_TYPES and isinstance(t.get("index"), int)
            and not isinstance(t.get("index"), bool) for t in value):
        return f"list {{type, index}} with a type among {', '.join(TASK_TYPES)}"


@dataclass
class RunDescription:
    """What run.json says about a run: enough to launch it again elsewhere. Written when the run is made
    (engine/records/record.py), read by the exports and past runs (each field checked, for a precise message)."""

    dir: Path  # where it is: not kept
    name: str = kept(check=_is(str, "a string"))
    script: str = kept(check=_is(str, "a file name"))
    args: list[str] = kept(missing=[], check=_is(list, "a list of strings", str))
    tasks: list[tuple[str, int]] = kept(check=_task_list, read=lambda tasks: [(t["type"], t["index"]) for t in tasks],
                                        write=lambda tasks: [{"type": t, "index": i} for t, i in tasks])
    env: dict[str, str] = kept(missing={}, check=_is(dict, "a mapping of strings", str))  # may hold secrets: 0600
    files: list[str] = kept(missing=[], check=_is(list, "a list of file names", str))
    gpus: bool = kept(False, read=bool)
    python: str = kept("")
    cwd: str = kept("")
    backend: str = kept("")
    framework: str = kept("tensorflow")  # --framework: whose variables the tasks got (machine/task_env.py)
    created: str = kept("")  # "%Y-%m-%dT%H:%M:%S%z": when the run was made

    @property
    def counts(self) -> dict[str, int]:
        """Tasks per type, in TensorFlow's order: {'worker': 2, 'ps': 1}."""
        counted = Counter(task_type for task_type, _ in self.tasks)
        return {t: counted[t] for t in TASK_TYPES if counted[t]}

    def as_json(self) -> dict:
        return {"format": RUN_JSON_FORMAT, **kept_of(self)}


def write_private_json(path: Path, data: dict, indent: int | None = 1) -> None:
    """The one writer of run.json and history.json: private (0600: the environment run.json records may hold
    secrets) and atomic (a temporary file, then rename), so a kernel killed mid-write leaves the previous file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with os.fdopen(os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(json.dumps(data, indent=indent) + "\n")  # dumps: json.dump never uses the C encoder
    os.replace(temporary, path)


def write_description(run_dir: Path, description: dict) -> None:
    """run.json: RunDescription.as_json(), and what is added later ("result", the threads set)."""
    write_private_json(RunFolder(run_dir).description, description)


def read_description(run_dir: str | os.PathLike) -> RunDescription:
    """run.json of a run folder, checked field by field so that a bad file gets a precise message."""
    path = RunFolder(run_dir).description
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OptionError(f"{path.parent} is not a kwnb run folder: it has no {DESCRIPTION}") from None
    except (OSError, ValueError) as error:
        raise OptionError(f"cannot read {path}: {error}") from None
    try:
        return RunDescription(Path(run_dir), **vars(read_kept(RunDescription, data)))
    except (TypeError, ValueError) as error:
        raise OptionError(f"{path}: {error}") from None


def find_run_dir(ref: str | os.PathLike, runs_dir: str | os.PathLike | None = None) -> Path:
    """A run folder from a path (the folder or its run.json) or a run name (its newest folder)."""
    path = Path(ref).expanduser()
    if path.name == DESCRIPTION and path.is_file():
        return path.parent
    if path.is_dir():
        if not (path / DESCRIPTION).is_file():
            raise OptionError(f"{path} is not a kwnb run folder: it has no {DESCRIPTION} (folders from before "
                              f"kwnb wrote {DESCRIPTION} cannot be reopened or exported: their logs are all there is)")
        return path
    name = str(ref)
    base = Path(runs_dir) if runs_dir else default_runs_dir()
    matches, names = [], set()
    if base.is_dir():
        for folder in base.iterdir():
            described = _peek_name(folder)
            if described:
                names.add(described)
            if described == name and folder.name.startswith(name + "-"):
                matches.append(folder)
    if not matches:
        where = f"in {base} (runs there: {', '.join(sorted(names)) or 'none'})" if base.is_dir() else \
            f"({base} does not exist)"
        raise OptionError(f"no run named {name!r} and no run folder at {path} {where}")
    return max(matches, key=lambda folder: launch_order(folder, name))


def _peek_name(folder: Path) -> str | None:
    try:
        name = json.loads((folder / DESCRIPTION).read_text()).get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None
