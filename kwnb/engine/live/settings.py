"""How a run is launched and watched, as one value, and the one declaration of every launch option.

Each field of LaunchSettings is an option: its default, its help and, for those a learner sets from
`%%kw_worker` and `kwnb run`, its flags and metavar (`option`, as ipyparallel's `Integer(5, config=True,
help=...)`); the others (`python_only`) are for Python callers of `kwnb.launch`. kwnb/options.py makes the
magic's and the CLI's arguments by walking these fields, kwnb/api.py `launch`'s signature and docstring
(tests/test_settings.py holds the three together). A new option is one field here, read where it is applied.

Checked when made: a LaunchSettings that exists is one whose every field passes its own check.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ...errors import OptionError
from ..tasks import roles
from .cluster import MAX_TASKS
from .policy import ON_FAILURE
from ...machine.task_env import FRAMEWORK_NAMES as FRAMEWORKS

if TYPE_CHECKING:
    from ...backends import Launcher

SECONDS = "SECONDS"
AT_LEAST_ZERO = (lambda value: value >= 0, "0 or more")
SECONDS_AT_LEAST_ZERO = (lambda value: value >= 0, "0 or more seconds")


def option(default: Any, help: str, *flags: str, metavar: str | None = None, check: tuple | None = None,
           convert: Callable | None = None, **parsing) -> Any:
    """A launch option the magic and `kwnb run` take as `flags`. `help` may name {default}; `parsing`: argparse's
    own words (type, action, choices: a callable is called when the arguments are made); `convert` turns what
    was parsed into the field's value; `check` is (test, what the value must be), applied however it is given."""
    return field(default=default, metadata=dict(help=help, flags=flags, metavar=metavar, check=check,
                                                convert=convert, parsing=parsing))


def python_only(default: Any, help: str, check: tuple | None = None, **keywords) -> Any:
    """An option of `kwnb.launch` and Run alone: the engine's own knobs, callbacks, or what the magic fills in."""
    return field(default=default, metadata=dict(help=help, flags=(), check=check), **keywords)


def parse_env(pairs: list[str] | None) -> dict[str, str] | None:
    """`--env KEY=VALUE` (repeated) as a mapping; a name a shell could not export is refused."""
    if pairs is None:
        return None
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise OptionError(f"--env takes KEY=VALUE with a valid variable name, not {pair!r}")
        env[key] = value
    return env


def _backend_names() -> tuple[str, ...]:
    from ...backends import backends  # the index lists them by entry point: read when the arguments are made

    return tuple(backends())


@dataclass(frozen=True)
class LaunchSettings:
    """Everything about a launch but the script. Groups: the cluster; the script's process; the failure
    policy; where the tasks run; the run's folder and what happens at its end."""

    # The cluster (engine/tasks/roles.py).
    n: int = option(2, f"number of worker processes (1 to {MAX_TASKS}; default {{default}}); worker 0 is the "
                       "chief unless --chief", "-n", "--workers", metavar="N", type=int)
    name: str | None = option(None, "run name (default: the script's file name without .py)", "--name")
    ps: int = option(0, "number of parameter-server tasks (default {default})", "--ps", metavar="K", type=int)
    chief: bool = option(False, "add a dedicated chief task (chief:0) besides the N workers; its exit decides the "
                                "run's status (tasks still running "
                                f"{roles.CHIEF_GRACE_SECONDS:g} s after it finished are stopped) and its curves "
                                "are the run's", "--chief", action="store_true")
    evaluator: bool = option(False, "add a sidecar evaluator task (evaluator:0), outside the cluster, that reads the "
                                    "checkpoints the training writes (tf.keras.utils.SidecarEvaluator); stopped "
                                    f"{roles.EVALUATOR_GRACE_SECONDS:g} s after training ends unless it ends first",
                             "--evaluator", action="store_true")
    framework: str = option("tensorflow", "what the tasks train with: TensorFlow's MultiWorkerMirroredStrategy "
                                          "(tf-keras, TF_CONFIG; default), or Keras 3 on JAX across processes "
                                          "(KERAS_BACKEND=jax and the KERAS_DISTRIBUTION_* variables that "
                                          "keras.distribution.initialize() reads; workers only)", "--framework",
                            choices=FRAMEWORKS)
    # The script's process.
    env: Mapping[str, str] | None = option(None, "extra environment variable for every task (repeatable)", "--env",
                                           metavar="KEY=VALUE",
                                           action="append", convert=parse_env)
    python: str | None = option(None, "Python interpreter for the tasks (default: this one)", "--python",
                                metavar="EXE")
    args: str | list[str] | None = option(
        None, "command-line arguments passed to the script, split as a shell would; the same as the "
              "words after --, which need no quotes", "--args", metavar='"..."',
        convert=lambda words: words.strip("\"'") if words else words)
    gpus: bool = option(False, "give each task its own GPUs, or share them with memory growth if there are fewer "
                               "GPUs than tasks (docs/gpus.md); default: none (CUDA_VISIBLE_DEVICES=-1)",
                        "--gpus", action="store_true")
    logdir: str | os.PathLike | None = option(None, "where the tasks write TensorBoard event files, if not under the "
                                                    "working directory; their scalars become curves", "--logdir",
                                              metavar="DIR")
    cwd: str | os.PathLike | None = python_only(None, "the tasks' working directory, where the run's folder goes "
                                                      "(default: this one)")
    files: list[str | os.PathLike] | None = python_only(None, "the job's helper files, copied into the run's "
                                                              "folder beside the script (%%kw_file adds them)")
    # The failure policy (engine/live/policy.py).
    timeout: float | None = option(None, "stop the whole run this long after its tasks started (time a scheduler "
                                         "keeps them queued, shown as pending, does not count)", "--timeout",
                                   metavar=SECONDS, type=float, check=(lambda value: value is None or value > 0,
                                                                       "positive"))
    on_failure: str = option("stop", "when a task fails: stop the others after a grace period (default), keep them "
                                     "running, or restart the cluster", "--on-failure", choices=ON_FAILURE)
    max_restarts: int = option(3, "restarts allowed with --on-failure restart (default {default})", "--max-restarts",
                               metavar="K", type=int, check=AT_LEAST_ZERO)
    failure_grace: float = option(5.0, "with --on-failure stop: how long the others may go on after a task failed, "
                                       "time to say what they saw (default {default:g}; TensorFlow sometimes needs "
                                       "its 10 s heartbeat)", "--failure-grace", metavar=SECONDS, type=float,
                                  check=SECONDS_AT_LEAST_ZERO)
    stall_after: float = option(60.0, "when no task has made progress for this long, say where each is blocked "
                                      "(default {default:g}; 0 turns it off)", "--stall-after", metavar=SECONDS,
                                type=float, check=(lambda value: isinstance(value, (int, float)) and value >= 0,
                                                   "0 (off) or a number of seconds"))
    stop_grace: float = python_only(3.0, "seconds a stopped task has between TERM and KILL",
                                    check=SECONDS_AT_LEAST_ZERO)
    chief_grace: float = python_only(roles.CHIEF_GRACE_SECONDS, "seconds the training tasks may outlive a chief "
                                                                "task that finished", check=SECONDS_AT_LEAST_ZERO)
    evaluator_grace: float = python_only(roles.EVALUATOR_GRACE_SECONDS, "seconds an evaluator may outlive the "
                                                                        "training", check=SECONDS_AT_LEAST_ZERO)
    # Where the tasks run: a launcher, or a backend's name (backends/); network and warm are the local backend's
    # options (backends/catalog.py declares their flags), kept here for Run to make that launcher.
    launcher: Launcher | str = option("local", "where tasks run: processes here (default), one Slurm job "
                                                 "(sbatch) or a Ray cluster's actors (ray)", "--backend",
                                        choices=_backend_names)
    network: str | None = python_only(None, "the local backend's --network")
    warm: bool | None = python_only(None, "the local backend's choice of warm interpreters (--cold: False)")
    # The run's folder and its end.
    runs_dir: str | os.PathLike | None = python_only(None, "where run folders go (default: $KWNB_RUNS_DIR, else "
                                                           ".kwnb/runs of the working directory)")
    keep_lines: int = python_only(300, "the log lines each task keeps on screen (default {default})",
                                  check=AT_LEAST_ZERO)
    on_end: list[Callable] | None = python_only(None, "callbacks called with the Run once every task has ended",
                                                compare=False)
    outputs: list[Callable] | None = python_only(None, "callables each task's reader hands its lines to besides "
                                                       "the task's own state (engine/readers/output.py)",
                                                 compare=False)

    def __post_init__(self):
        check_values({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        extra = [flag for flag, asked in (("--ps", self.ps), ("--chief", self.chief), ("--evaluator", self.evaluator))
                 if asked]
        if self.framework == "jax" and extra:
            raise OptionError(f"--framework jax runs workers only (every process is one of keras.distribution's), "
                              f"not {' or '.join(extra)}")

    @classmethod
    def of(cls, owner: str, **keywords) -> "LaunchSettings":
        """From keyword arguments; an unknown one raises the TypeError Python raises for `owner`'s signature."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = next((key for key in keywords if key not in known), None)
        if unknown is not None:
            raise TypeError(f"{owner}() got an unexpected keyword argument {unknown!r}")
        return cls(**keywords)


def declared_options() -> Iterator[dataclasses.Field]:
    """Every launch option, in the order `kwnb.launch` lists them."""
    return iter(dataclasses.fields(LaunchSettings))


def help_of(option: dataclasses.Field) -> str:
    return option.metadata["help"].format(default=option.default)


def spelled(option: dataclasses.Field) -> str:
    """How the user wrote it: its longest flag, else (from Python) its name."""
    return option.metadata["flags"][-1] if option.metadata["flags"] else option.name


def check_values(values: Mapping[str, Any], spell: Callable[[dataclasses.Field], str] = lambda o: o.name) -> None:
    """Refuse a value its option's check or choices rule out, named as `spell` writes the option."""
    for option in declared_options():
        if option.name not in values:
            continue
        value, choices = values[option.name], option.metadata.get("parsing", {}).get("choices")
        if isinstance(choices, tuple) and value not in choices:
            raise OptionError(f"{spell(option)} must be one of {', '.join(choices)}, not {value!r}")
        test, what = option.metadata["check"] or (None, "")
        if test is not None and not test(value):
            raise OptionError(f"{spell(option)} must be {what}, not {value!r}")


DEFAULTS = LaunchSettings()
