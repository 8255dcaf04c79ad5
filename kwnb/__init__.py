"""kwnb: launch and watch multi-worker TensorFlow training from a notebook cell.

Inside worker processes only `kwnb.report` is used, so importing kwnb stays light: the engine
loads on first use, and IPython and ipywidgets only with `%load_ext kwnb`.

    kwnb/task/      runs inside each task: standard library only
    kwnb/engine/    runs, tasks, run folders, logs, metrics, summaries (no IPython, no ipywidgets)
    kwnb/backends/  ways of starting tasks, found by name: local, slurm
    kwnb/export/    a run folder as Kubernetes objects
    kwnb/notebook/  the magics and the dashboard (the only code that imports IPython or ipywidgets)
    kwnb/cli.py     the terminal
"""
from .errors import KwnbError
from .task.report import report

from .version import __version__
__all__ = ["launch", "get_run", "runs", "open_run", "report", "Run", "Task", "Worker", "KwnbError", "load_ipython_extension"]


def __getattr__(name):
    if name in ("launch", "get_run", "runs"):
        from . import api

        return getattr(api, name)
    if name == "open_run":
        from .engine.records.past import open_run

        return open_run
    if name == "Run":
        from .engine.live.run import Run

        return Run
    if name == "Task" or name in _class_aliases():
        from .engine.tasks.task import Task

        return Task
    raise AttributeError(f"module 'kwnb' has no attribute {name!r}")


def _class_aliases() -> dict:
    from .engine.records.compat import CLASS_ALIASES

    return CLASS_ALIASES


def load_ipython_extension(ipython):
    from .notebook.extension import load_ipython_extension as load

    load(ipython)
