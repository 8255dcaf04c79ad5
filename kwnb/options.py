"""Launch options, defined once for both `%%kw_worker` (IPython magic_arguments) and `kwnb run` (argparse).

Kept as plain (args, kwargs) pairs so that this module needs no IPython. It reads only light
engine modules (the failure policies, the task limit) and each backend's own options, as the
backends' index declares them (kwnb/backends/catalog.py): no backend is imported to list them.
"""
from __future__ import annotations

import argparse

from .backends import argument_dest, backend_arguments, backends, make_launcher
from .engine.live.cluster import MAX_TASKS
from .engine.live.policy import ON_FAILURE
from .engine.live.settings import DEFAULTS  # kwnb.launch's defaults, declared once
from .errors import OptionError

LAUNCH_ARGUMENTS: list[tuple[tuple, dict]] = [
    (("-n", "--workers"), dict(type=int, default=DEFAULTS.n, metavar="N",
                                help=f"number of worker processes (1 to {MAX_TASKS}; default {DEFAULTS.n})")),
    (("--ps",), dict(type=int, default=DEFAULTS.ps, metavar="K",
                         help=f"number of parameter-server tasks (default {DEFAULTS.ps})")),
    (("--chief",), dict(action="store_true",
                        help="add a dedicated chief task (chief:0) besides the N workers; its exit decides the run's "
                             f"status (tasks still running {DEFAULTS.chief_grace:g} s after it finished are "
                             "stopped) and its curves are the run's")),
    (("--evaluator",), dict(action="store_true",
                            help="add a sidecar evaluator task (evaluator:0), outside the cluster, that reads the "
                                 "checkpoints the training writes (tf.keras.utils.SidecarEvaluator); stopped "
                                 f"{DEFAULTS.evaluator_grace:g} s after training ends unless it ends first")),
    (("--name",), dict(default=None, help="run name (default: the script's file name without .py)")),
    (("--timeout",), dict(type=float, default=None, metavar="SECONDS",
                          help="stop the whole run this long after its tasks started (time a scheduler keeps "
                               "them queued, shown as pending, does not count)")),
    (("--env",), dict(action="append", default=[], metavar="KEY=VALUE",
                      help="extra environment variable for every task (repeatable)")),
    (("--python",), dict(default=None, metavar="EXE", help="Python interpreter for the tasks (default: this one)")),
    (("--args",), dict(default="", metavar='"..."', help="command-line arguments passed to the script")),
    (("--on-failure",), dict(choices=ON_FAILURE, default=DEFAULTS.on_failure,
                             help="when a task fails: stop the others after a grace period (default), "
                                  "keep them running, or restart the cluster")),
    (("--failure-grace",), dict(type=float, default=DEFAULTS.failure_grace, metavar="SECONDS",
                                 help="with --on-failure stop: how long the others may go on after a task failed, "
                                      "time to say what they saw (default "
                                      f"{DEFAULTS.failure_grace:g}; TensorFlow sometimes needs its 10 s heartbeat)")),
    (("--max-restarts",), dict(type=int, default=DEFAULTS.max_restarts, metavar="K",
                                help="restarts allowed with --on-failure restart")),
    (("--stall-after",), dict(type=float, default=DEFAULTS.stall_after, metavar="SECONDS",
                              help="when no task has made progress for this long, say where each is blocked "
                                   f"(default {DEFAULTS.stall_after:g}; 0 turns it off)")),
    (("--logdir",), dict(default=None, metavar="DIR",
                         help="where the tasks write TensorBoard event files, if not under the working directory; "
                              "their scalars become curves")),
    (("--gpus",), dict(action="store_true",
                       help="give each task its own GPUs, or share them with memory growth if there are fewer "
                            "GPUs than tasks (docs/gpus.md); default: none (CUDA_VISIBLE_DEVICES=-1)")),
    (("--backend",), dict(choices=tuple(backends()), default=DEFAULTS.launcher,
                          help="where tasks run: processes here (default) or one Slurm job (sbatch)")),
    *backend_arguments(),
]


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    for args, kwargs in LAUNCH_ARGUMENTS:
        parser.add_argument(*args, **kwargs)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise OptionError(f"--env takes KEY=VALUE with a valid variable name, not {pair!r}")
        env[key] = value
    return env


def launch_options(namespace: argparse.Namespace) -> dict:
    """Keyword arguments for `kwnb.launch` from parsed options."""
    if namespace.max_restarts < 0:
        raise OptionError(f"--max-restarts must be 0 or more, not {namespace.max_restarts}")
    if not namespace.failure_grace >= 0:
        raise OptionError(f"--failure-grace must be 0 or more seconds, not {namespace.failure_grace}")
    backend_options = {key: getattr(namespace, key) for key in
                       (argument_dest(args, kwargs) for args, kwargs in backend_arguments())}
    return dict(
        n=namespace.workers,
        ps=namespace.ps,
        chief=namespace.chief,
        evaluator=namespace.evaluator,
        name=namespace.name,
        timeout=namespace.timeout,
        env=parse_env(namespace.env),
        python=namespace.python,
        args=namespace.args.strip("\"'") if namespace.args else "",
        on_failure=namespace.on_failure,
        failure_grace=namespace.failure_grace,
        max_restarts=namespace.max_restarts,
        gpus=namespace.gpus,
        stall_after=namespace.stall_after,
        logdir=namespace.logdir,
        launcher=make_launcher(namespace.backend, **backend_options),
    )

