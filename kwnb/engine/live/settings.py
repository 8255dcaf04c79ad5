"""How a run is launched and watched, as one value: `kwnb.launch`'s and `Run`'s keyword arguments, which
`%%kw_worker` and `kwnb run` fill from their options (kwnb/options.py takes its defaults from here).

Checked when made: a LaunchSettings that exists is one the failure policy accepts (engine/live/policy.py).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from ..tasks import roles
from . import policy

if TYPE_CHECKING:
    from ...backends import Launcher


@dataclass(frozen=True)
class LaunchSettings:
    """Everything about a launch but the script. Groups: the cluster; the script's process; the failure
    policy; where the tasks run; the run's folder and what happens at its end."""

    # The cluster: n workers (worker 0 is the chief unless `chief`), ps parameter servers, a dedicated chief
    # task, a sidecar evaluator (engine/tasks/roles.py); the run's name (default: the script's file name).
    n: int = 2
    name: str | None = None
    ps: int = 0
    chief: bool = False
    evaluator: bool = False
    # The script's process: extra environment variables, the interpreter (default: this one), its arguments
    # (a string is split as a shell would), whether it sees GPUs, its working directory (default: this one),
    # the job's helper files copied beside it, where it writes TensorBoard event files if not under cwd.
    env: Mapping[str, str] | None = None
    python: str | None = None
    args: str | list[str] | None = None
    gpus: bool = False
    cwd: str | os.PathLike | None = None
    files: list[str | os.PathLike] | None = None
    logdir: str | os.PathLike | None = None
    # The failure policy: stop the run after `timeout` s of running; on a task's failure stop the others
    # after failure_grace s, keep them, or restart the cluster up to max_restarts times; a stop's TERM becomes
    # KILL after stop_grace s; tasks outliving a finished chief by chief_grace s and an evaluator outliving
    # training by evaluator_grace s are stopped; stall_after s without progress is a stall (0: off).
    timeout: float | None = None
    on_failure: str = "stop"
    max_restarts: int = 3
    failure_grace: float = 5.0
    stop_grace: float = 3.0
    chief_grace: float = roles.CHIEF_GRACE_SECONDS
    evaluator_grace: float = roles.EVALUATOR_GRACE_SECONDS
    stall_after: float = 60.0
    # Where the tasks run: a launcher, or a backend's name with its network and warm-pool choice (backends/).
    launcher: "Launcher | str" = "local"
    network: str | None = None
    warm: bool | None = None
    # The run's folder (under runs_dir, default ./runs), the log lines each task keeps on screen, the
    # callbacks called once every task has ended (they get the Run), and the outputs each task's reader
    # hands its lines to besides the task's own state (engine/readers/output.py: `kwnb run`'s terminal).
    runs_dir: str | os.PathLike | None = None
    keep_lines: int = 300
    on_end: list[Callable] | None = field(default=None, compare=False)
    outputs: list[Callable] | None = field(default=None, compare=False)

    def __post_init__(self):
        policy.check_options(self.on_failure, self.timeout, self.stall_after)

    @classmethod
    def of(cls, owner: str, **keywords) -> "LaunchSettings":
        """From keyword arguments; an unknown one raises the TypeError Python raises for `owner`'s signature."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = next((key for key in keywords if key not in known), None)
        if unknown is not None:
            raise TypeError(f"{owner}() got an unexpected keyword argument {unknown!r}")
        return cls(**keywords)


DEFAULTS = LaunchSettings()
