"""The runs of this process, by name: what `%kw_wait NAME` and `kwnb.get_run()` look up.

Starting a run under a name that is still running stops the old one first, so re-running a
cell never leaves two clusters fighting; at exit every run is stopped.
"""
from __future__ import annotations

import atexit
import os

from ...errors import KwnbError, UnknownRun
from ...task.runfolder import find_run_dir
from .run import Run, engine_of
from .settings import DEFAULTS

_RUNS: list[Run] = []


def launch(script: str | os.PathLike, n: int = DEFAULTS.n, name: str | None = None, **options) -> Run:
    """Start `script` on `n` workers (plus `ps=K` parameter servers) and return the Run at once."""
    run = Run(script, n, name, **options)  # validates everything before anything starts
    for previous in _RUNS:
        if previous.name == run.name and not previous.done:
            previous.stop(reason=f"replaced by a new run of {run.name!r}")
            engine_of(run).say(note=f"stopped the previous run of {run.name!r} ({previous.dir.name}) first")
    run.start()  # raises if the tasks cannot be started; such a run is not kept
    _RUNS.append(run)
    return run


def get_run(name: str | None = None) -> Run:
    """The latest run of that name (the latest run of all when no name is given)."""
    for run in reversed(_RUNS):
        if name is None or run.name == name:
            return run
    known = ", ".join(sorted({r.name for r in _RUNS})) or "none yet"
    raise UnknownRun(f"no run named {name!r} (runs: {known}){_on_disk(name)}" if name else "no run has been started")


def _on_disk(name: str) -> str:
    """After a kernel restart the learner's `%kw_wait main` finds nothing live: say where yesterday's run is."""
    try:
        find_run_dir(name)
    except (KwnbError, OSError):
        return ""
    return f"; a past run of that name is reopened from its folder with kwnb.open_run({name!r}) or %kw_show {name}"


def runs() -> list[Run]:
    return list(_RUNS)


def stop_all() -> None:
    for run in _RUNS:
        if not run.done:
            run.stop(reason="stopped at exit")


atexit.register(stop_all)
