"""Runs replayed from captures of real TensorFlow runs, through kwnb's unchanged engine.

`RecordingLauncher` is the local launcher with each task started under tests/scripts/record_task.py, which keeps
what the task printed, chunk by chunk with its time, its exit code, and the TF_CONFIG record it wrote.
`capture(...)` makes such a run and stores it under tests/data/replays/NAME/ (ports, the scripts' folder and the
run's working folder replaced by placeholders, so that a capture plays anywhere). `ReplayLauncher(NAME)` is a
Launcher whose tasks are real short-lived processes (tests/scripts/replay_task.py) that write the captured output
to the task's log at the captured times and exit with the captured code, or stay silent until kwnb ends them; kwnb's
supervisor, reader, diagnoses and records see a run as they saw the real one, at a fraction of its cost: no
TensorFlow is imported. tests/test_replay_drift.py captures a few runs afresh and fails when TensorFlow prints
something else than the captures say.

It lives in tests/: it plays the suite's own captures and serves no user (`kwnb.launch(..., launcher=...)` takes it).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import kwnb
from kwnb.backends.base import Launcher, TaskLaunch, TaskProcess
from kwnb.backends.local import LocalLauncher, LocalProcess
from kwnb.machine.ports import free_ports
from kwnb.task.process_group import OWN_PROCESS_GROUP
from kwnb.task.tf_config import TaskId

TESTS = Path(__file__).parent
SCRIPTS = TESTS / "scripts"
REPLAYS = TESTS / "data" / "replays"
RECORDER, PLAYER = SCRIPTS / "record_task.py", SCRIPTS / "replay_task.py"
# Where a capture names this machine's places; replaced at capture time and put back at replay time.
SCRIPTS_MARK, CWD_MARK = "@@SCRIPTS@@", "@@CWD@@"
# A pause longer than this between two events of a captured run (any of its tasks) is replayed this long: the
# long ones were a loaded machine's (TensorFlow's import took 2-30 s in the captures) or TensorFlow's heartbeat
# (about 9 s before "unhealthy"); what kwnb makes of a log depends on the order of its lines and exits, not on them.
# A task that never ended by itself stays silent until kwnb ends it, whatever this is. None: as captured.
MAX_GAP = 0.5


def port_mark(position: int) -> str:
    return f"@@PORT{position}@@"


def task_file(task: TaskId) -> str:
    return f"{task.type}-{task.index}.jsonl"


class RecordingLauncher(LocalLauncher):
    """The local launcher (host network, no warm pool: a task's first lines are then its own), each task under
    the recorder, its recording into `folder`."""

    name = "local"

    def __init__(self, folder: Path):
        super().__init__(network="host", warm=False)
        self.folder = Path(folder)
        self.addresses_given: list[str] = []

    def addresses(self, tasks):
        self.addresses_given = super().addresses(tasks)
        return self.addresses_given

    def start(self, launch: TaskLaunch) -> TaskProcess:
        launch.argv = [sys.executable, str(RECORDER), str(self.folder / task_file(launch.task)), *launch.argv]
        return super().start(launch)


def capture(name: str, script: Path, *, into: Path = REPLAYS, n: int = 2, cwd: Path, wait: float = 400,
            **options) -> "kwnb.engine.live.run.Run":
    """A real run of `script`, recorded into `into/name/` with its places replaced by placeholders; returns the Run."""
    raw = Path(tempfile.mkdtemp(prefix=f"kwnb-capture-{name}-"))
    launcher = RecordingLauncher(raw)
    run = kwnb.launch(script, n=n, name=name, launcher=launcher, runs_dir=Path(cwd) / "runs", cwd=cwd, **options)
    _wait_then_stop(run, wait)
    ports = [address.rsplit(":", 1)[1] for address in launcher.addresses_given]
    folder = Path(into) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for recording in sorted(raw.glob("*.jsonl")):
        text = with_marks(recording.read_text(encoding="utf-8"), Path(script).parent, cwd, ports)
        (folder / recording.name).write_text(text, encoding="utf-8")
    shutil.rmtree(raw, ignore_errors=True)
    return run


def with_marks(text: str, scripts: Path, cwd: Path, ports: list[str]) -> str:
    """What a task printed, with this machine's places (the scripts' folder, the run's working folder, its ports in
    task order) replaced by the placeholders a capture keeps."""
    text = text.replace(str(scripts), SCRIPTS_MARK).replace(str(cwd), CWD_MARK)
    for position, port in enumerate(ports):
        text = re.sub(rf"(?<=:){port}(?!\d)", port_mark(position), text)
    return text


def run_afresh(name: str, cwd: Path, wait: float = 400) -> tuple["kwnb.engine.live.run.Run", dict[str, str]]:
    """The scenario run with real TensorFlow as a learner's run is (the tasks forked from one import; the host
    network, as captured), not recorded: the Run, and each task's log ("worker-0": text) with a capture's
    placeholders, as the run's reader kept it (`Run.logs`, runtime lines included). A recorded run wraps each task's
    argv, so each imports TensorFlow itself: twice the imports."""
    script, args, options = SCENARIOS[name]
    run = kwnb.launch(SCRIPTS / script, n=2, name=name, args=args, runs_dir=Path(cwd) / "runs", cwd=cwd,
                      network="host", **options)
    _wait_then_stop(run, wait)
    tasks = run.snapshot().tasks
    ports = [task.address.rsplit(":", 1)[1] for task in tasks]
    return run, {task_file(task.id).removesuffix(".jsonl"):
                 with_marks(run.logs(position, all=True), SCRIPTS, cwd, ports) for position, task in enumerate(tasks)}


def _wait_then_stop(run, wait: float) -> None:
    """A captured run's end: waited for, once more if its first task had not ended by then, then stopped."""
    if run.wait(wait)[0] is None:
        run.wait(wait)
    run.stop()


def captured_text(name: str, task: str = "worker-0", into: Path = REPLAYS) -> str:
    """Everything a captured task printed, as its log held it (placeholders left in)."""
    lines = (Path(into) / name / f"{task}.jsonl").read_text(encoding="utf-8").splitlines()
    return "".join(json.loads(line).get("out", "") for line in lines)


def _timeline(folder: Path, max_gap: float | None) -> dict[float, float]:
    """Captured time -> replayed time, for every event of the run's tasks together (their order is kept)."""
    times = sorted({0.0} | {json.loads(line)["t"] for recording in folder.glob("*.jsonl")
                            for line in recording.read_text(encoding="utf-8").splitlines()})
    mapped, now = {0.0: 0.0}, 0.0
    for before, after in zip(times, times[1:]):
        now += after - before if max_gap is None else min(after - before, max_gap)
        mapped[after] = round(now, 3)
    return mapped


class ReplayLauncher(Launcher):
    """Plays tests/data/replays/NAME/: one captured task per task of the run, in the order kwnb starts them."""

    name = "replay"
    runs_here = True

    def __init__(self, name: str, *, cwd: Path | None = None, scripts: Path = SCRIPTS, into: Path = REPLAYS,
                 max_gap: float | None = MAX_GAP):
        self.folder = Path(into) / name
        if not self.folder.is_dir():
            raise FileNotFoundError(f"no capture {self.folder} (tests/replay.py's capture() makes one)")
        self.cwd, self.scripts = cwd, Path(scripts)
        self.ports: list[str] = []
        self.work = Path(tempfile.mkdtemp(prefix=f"kwnb-replay-{name}-"))
        self.max_gap, self.times = max_gap, _timeline(self.folder, max_gap)

    def addresses(self, tasks: list[TaskId]) -> list[str]:
        addresses = [f"localhost:{port}" for port in free_ports(len(tasks))]
        self.ports = [address.rsplit(":", 1)[1] for address in addresses]
        return addresses

    def start(self, launch: TaskLaunch) -> TaskProcess:
        text = (self.folder / task_file(launch.task)).read_text(encoding="utf-8")
        text = text.replace(SCRIPTS_MARK, str(self.scripts)).replace(CWD_MARK, str(self.cwd or launch.cwd))
        for position, port in enumerate(self.ports):
            text = text.replace(port_mark(position), port)
        events = [json.loads(line) for line in text.splitlines()]
        for event in events:
            if "tf_config_set" in event:  # written when the recorder saw it, shortly after its own time
                behind = min(event["t"] - event["tf_config_set"]["time"], self.max_gap or float("inf"))
                event["tf_config_set"]["time"] = max(0.0, self.times[event["t"]] - behind)
            event["t"] = self.times[event["t"]]
        played = self.work / task_file(launch.task)
        played.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")
        with open(launch.log_path, "ab", buffering=0) as log:
            popen = subprocess.Popen([sys.executable, str(PLAYER), str(played)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=launch.env,
                                     cwd=launch.cwd, **OWN_PROCESS_GROUP)
        return LocalProcess(popen)  # polled, sampled and signalled as the local backend's tasks are

    def finish(self) -> list[str]:
        shutil.rmtree(self.work, ignore_errors=True)
        return []


# Every capture the suite replays: name -> (script in tests/scripts, its arguments, kwnb.launch's options). The
# tests launch the same script with the same arguments and options, with launcher=ReplayLauncher(name).
SCENARIOS: dict[str, tuple[str, str, dict]] = {
    "raise": ("diagnose_fit.py", "raise", {"stall_after": 60}),
    "keras3": ("diagnose_fit.py", "keras3", {"stall_after": 60, "env": {"TF_USE_LEGACY_KERAS": "0"}}),
    "clean-keras3-env": ("diagnose_fit.py", "clean", {"stall_after": 60, "env": {"TF_USE_LEGACY_KERAS": "0"}}),
    "late_strategy": ("known_errors.py", "late_strategy", {}),
    "estimator": ("known_errors.py", "estimator", {}),
    "session": ("known_errors.py", "session", {}),
    "loop": ("diagnose_fit.py", "loop 10", {}),
    "uneven": ("diagnose_fit.py", "uneven 10", {}),
    "paths": ("diagnose_fit.py", "paths 10", {}),
    "data": ("diagnose_fit.py", "data 10", {}),
    "loopdata": ("diagnose_fit.py", "loopdata 10", {}),
    "unset": ("diagnose_fit.py", "unset", {"stall_after": 240}),
    "noscope": ("diagnose_fit.py", "noscope", {"stall_after": 240}),
    "diverge": ("diagnose_fit.py", "diverge", {"stall_after": 240}),
    "tf-function-reduction": ("tf_function_errors.py", "reduction", {}),
    "tf-function-raise": ("tf_function_errors.py", "raise", {}),
    "tf-function-layer": ("tf_function_errors.py", "layer", {}),
    "tf-function-assert": ("tf_function_errors.py", "assert", {}),
    "same-path-savedmodel": ("same_path_save.py", "savedmodel", {}),  # a failing try (capture_same_path.py)
}


def capture_scenario(name: str, cwd: Path, into: Path = REPLAYS):
    script, args, options = SCENARIOS[name]
    return capture(name, SCRIPTS / script, into=into, cwd=cwd, args=args, **options)


def replay(name: str, cwd: Path, **more):
    """The scenario's run again, replayed: the same script, arguments and options as its capture."""
    script, args, options = SCENARIOS[name]
    return kwnb.launch(SCRIPTS / script, n=2, name=name, args=args, runs_dir=Path(cwd) / "runs", cwd=cwd,
                       launcher=ReplayLauncher(name, cwd=cwd), **{**options, **more})


def replays(names, folder: Path, wait: float = 120) -> dict:
    """The scenarios replayed at once and waited for, with the pictures kwnb.launch draws at a run's end (a replay
    costs its captured time, not CPU: together they take as long as the longest, then the pictures' drawing)."""
    started = {name: replay(name, Path(folder)) for name in names}
    for run in started.values():
        run.wait(wait, pictures=True)
    return started
