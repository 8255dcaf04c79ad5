"""The run folder: every file a run keeps, every variable that tells a task where they are, and run.json.

The folder is the contract between the engine (which creates and follows it) and the tasks (which
write their logs, reports and, under Slurm, their TF_CONFIG and exit codes into it), so its names are
spelled here only, in standard-library code both sides can import.

    .kwnb/runs/NAME-YYYYmmdd-HHMMSS[-K]/
        run.json                 what was launched (RunDescription): export or launch it again later;
                                 at the end, how it went ("result": engine/records/record.py, read by engine/records/past.py)
        history.json             the metric rows at the end (epochs and steps of each task)
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

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

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
# Variables that belong to one task or to the launching machine, never to a whole job.
PER_TASK_ENV = ("TF_CONFIG", POSITION_ENV, PARENT_PID_ENV)

RUNS_DIR_ENV = "KWNB_RUNS_DIR"
DESCRIPTION = "run.json"
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
@dataclass
class RunDescription:
    """What run.json says about a run: enough to launch it again elsewhere."""

    dir: Path
    name: str
    script: str
    args: list[str]
    tasks: list[tuple[str, int]]
    env: dict[str, str]
    files: list[str]
    gpus: bool = False

    @property
    def counts(self) -> dict[str, int]:
        """Tasks per type, in TensorFlow's order: {'worker': 2, 'ps': 1}."""
        counted = Counter(task_type for task_type, _ in self.tasks)
        return {t: counted[t] for t in TASK_TYPES if counted[t]}


def write_description(run_dir: Path, description: dict) -> None:
    """run.json, private (0600): the environment it records may hold secrets."""
    path = RunFolder(run_dir).description
    with os.fdopen(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600), "w") as handle:
        json.dump(description, handle, indent=2)
        handle.write("\n")


def read_description(run_dir: str | os.PathLike) -> RunDescription:
    """run.json of a run folder, checked field by field so that a bad file gets a precise message."""
    path = RunFolder(run_dir).description
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OptionError(f"{path.parent} is not a kwnb run folder: it has no {DESCRIPTION}") from None
    except (OSError, ValueError) as error:
        raise OptionError(f"cannot read {path}: {error}") from None

    def need(key, kind, what, default=None):
        value = data.get(key, default) if isinstance(data, dict) else None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise OptionError(f"{path}: {key!r} must be {what}")
        return value

    name, script = need("name", str, "a string"), need("script", str, "a file name")
    args = need("args", list, "a list of strings", [])
    env = need("env", dict, "a mapping of strings", {})
    files = need("files", list, "a list of file names", [])
    tasks = need("tasks", list, "a list of {type, index}")
    if not all(isinstance(a, str) for a in args) or not all(isinstance(f, str) for f in files) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise OptionError(f"{path}: 'args', 'files' and 'env' must hold strings")
    if not tasks or not all(isinstance(t, dict) and t.get("type") in TASK_TYPES and isinstance(t.get("index"), int)
                            for t in tasks):
        raise OptionError(f"{path}: 'tasks' must list {{type, index}} with a type among {', '.join(TASK_TYPES)}")
    return RunDescription(Path(run_dir), name, script, list(args), [(t["type"], t["index"]) for t in tasks],
                          dict(env), list(files), bool(data.get("gpus", False)))


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
