"""Run a corpus entry under kwnb (kwnb.launch, as a learner's notebook does) or by hand (plain
subprocess.Popen with each task's TF_CONFIG, as tests/scripts/capture_tf_logs.py does, or for Keras 3 on JAX the
variables keras.distribution.initialize() reads, as its docstring says), and judge the result."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import portpicker

import kwnb

from .entries import Entry

TIMEOUT = 900  # seconds a run may take, start to end: under a load average of 30-60 on 2 cores, 6 minutes were seen
AFTER_FAILURE = 15  # by hand: seconds the other tasks get after the first failure (kwnb's policy stops them in 5)
SERVING = ("ps",)


@dataclass
class Outcome:
    exit_codes: list[int | None]
    kinds: list[str]  # the diagnoses given (kwnb only)
    messages: list[str]
    seconds: float
    status: str = ""  # kwnb's: "finished" passed (a chief job's serving tasks stopped by kwnb end -15)

    @property
    def passed(self) -> bool:
        return self.status == "finished" if self.status else passed(self.exit_codes)


def passed(exit_codes) -> bool:
    """A run passes when no task failed (a serving task killed at the end, None, is no failure) and one ended."""
    return any(code == 0 for code in exit_codes) and all(code in (0, None) for code in exit_codes)


def roles(entry: Entry) -> list[tuple[str, int]]:
    """The tasks in kwnb's order: a chief task first, the workers, then the ps tasks."""
    return ([("chief", 0)] if entry.chief else []) + [("worker", i) for i in range(entry.n)] + \
        [("ps", i) for i in range(entry.ps)]


def under_kwnb(entry: Entry, folder: Path, **options) -> kwnb.Run:
    """Launch the entry; the caller waits (several run at once in the test)."""
    script = entry.write(folder / "program")
    return kwnb.launch(script, entry.n, name=entry.name, ps=entry.ps, chief=entry.chief, env=dict(entry.env) or None,
                       args=list(entry.args), runs_dir=folder / "runs", cwd=folder / "program",
                       framework=entry.framework, **options)


def kwnb_outcome(run: kwnb.Run) -> Outcome:
    run.wait(TIMEOUT)
    return Outcome(list(run.exit_codes), sorted({d.kind for d in run.diagnoses}), [d.message for d in run.diagnoses],
                   round(run.elapsed, 1), str(run.status))


def by_hand(entry: Entry, folder: Path) -> Outcome:
    program = folder / "program"  # the working directory, as under kwnb: what a program saves stays out of the tree
    script = entry.write(program)
    tasks = roles(entry)
    ports = [portpicker.pick_unused_port() for _ in tasks]
    procs = []
    started = time.time()
    for position, (kind, index) in enumerate(tasks):
        env = {**os.environ, **hand_variables(entry, tasks, ports, position), "CUDA_VISIBLE_DEVICES": "-1",
               "PYTHONUNBUFFERED": "1", **entry.env}
        with open(folder / f"{kind}-{index}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, str(script), *entry.args], cwd=program, env=env,
                                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True))
    try:
        codes = wait_by_hand(procs, [kind for kind, _ in tasks], entry)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Outcome(codes, [], [], round(time.time() - started, 1))


def hand_variables(entry: Entry, tasks: list[tuple[str, int]], ports: list[int], position: int) -> dict[str, str]:
    """What a learner sets by hand for one task: TF_CONFIG (and tf-keras), or for Keras 3 on JAX the backend, the
    CPU and the three variables keras.distribution.initialize() reads (the first task is the coordinator)."""
    if entry.framework == "jax":
        return {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "KERAS_DISTRIBUTION_JOB_ADDRESSES":
                f"localhost:{ports[0]}", "KERAS_DISTRIBUTION_NUM_PROCESSES": str(len(tasks)),
                "KERAS_DISTRIBUTION_PROCESS_ID": str(position)}
    cluster: dict[str, list[str]] = {}
    for (kind, _), port in zip(tasks, ports):
        cluster.setdefault(kind, []).append(f"localhost:{port}")
    kind, index = tasks[position]
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}),
            "TF_USE_LEGACY_KERAS": "1"}


def wait_by_hand(procs, kinds, entry: Entry) -> list[int | None]:
    """Each task's exit code once every training task ended (a chief job: the chief), or AFTER_FAILURE s after
    a failure, or TIMEOUT s (None: still running, to be killed)."""
    end = time.time() + TIMEOUT
    trainers = [i for i, kind in enumerate(kinds) if kind == "chief"] if entry.chief else \
        [i for i, kind in enumerate(kinds) if kind not in SERVING]
    while time.time() < end:
        codes = [proc.poll() for proc in procs]
        if all(codes[i] is not None for i in trainers):
            break
        if any(code not in (None, 0) for code in codes):
            end = min(end, time.time() + AFTER_FAILURE)
        time.sleep(0.2)
    return [proc.poll() for proc in procs]


def verdict_problems(entry: Entry, outcome: Outcome) -> list[str]:
    """What kwnb said wrong about the entry (empty: the verdict held)."""
    problems = []
    if entry.race and set(outcome.kinds) <= set(entry.kinds):
        pass  # a race the program won this time: fewer failures, fewer kinds
    elif sorted(set(entry.kinds)) != sorted(set(outcome.kinds) - set(entry.may_add)):
        problems.append(f"said {outcome.kinds or 'nothing'}, expected {list(entry.kinds) or 'nothing'}")
    if entry.says and not any(entry.says in message for message in outcome.messages):
        problems.append(f"no diagnosis says {entry.says!r}")
    return problems
