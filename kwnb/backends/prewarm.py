"""A warm first cell: when the extension is loaded, the warm pool (warm.py) prepares interpreters for
the run a first cell most likely starts, `%%kw_worker script.py -n 2` with the default options, so that
a cell run some seconds later skips `import tensorflow` on every worker.

The pool's own rules apply: within the session's limits, at nice 19, only when the CPUs are quiet, and
the next run's own environment decides (a run with other options starts cold, and the pool then follows
what the user runs). The cell's script is not written yet, so these import TensorFlow, as the tutorials'
scripts do (warm_room.warm_imports); after a run of a script without TensorFlow the pool's import
nothing. Nothing happens with KWNB_WARM=0.
"""
from __future__ import annotations

import os
import sys
import threading


def prewarm(count: int) -> threading.Thread | None:
    """Start filling the pool for a run of `count` tasks (the caller knows the default: the launch options are
    declared above this layer) in the background (a network probe and the limits take ~10-50 ms)."""
    if os.environ.get("KWNB_WARM", "1") == "0":
        return None
    thread = threading.Thread(target=_prepare, args=(count, os.getcwd()), name="kwnb-prewarm", daemon=True)
    thread.start()
    return thread


def _prepare(count: int, cwd: str) -> None:
    from ..errors import OptionError
    from ..machine.limits import read_limits
    from ..machine.neighbours import neighbours
    from ..machine.task_env import TaskFacts, task_environment
    from . import netns, network_choice
    from .warm import POOL
    from .warm_room import warm_imports

    # A default run's tasks, less what is per task, as the local launcher starts them (threads, temporary folder).
    env = task_environment(TaskFacts(tasks=count, cpus=read_limits().cpus), here=True)
    try:
        network, said_by = network_choice.wanted(None)
    except OptionError:  # the run itself says what is wrong
        return
    choice = network_choice.choose(network, said_by, False, netns.support(), neighbours())
    # sys.executable: a run's Python unless --python says otherwise (engine/live/inputs.py, find_python)
    POOL.prepare(sys.executable, env, cwd, count, private=choice.network == "private", imports=warm_imports(None))
