"""kwnb: launch and watch multi-worker TensorFlow training from a notebook cell.

Inside worker processes only `kwnb.report` is used, so importing kwnb stays light: the engine
loads on first use, and IPython and ipywidgets only with `%load_ext kwnb`.
"""
from .report import report

__version__ = "0.1.0"
__all__ = ["launch", "get_run", "runs", "report", "Run", "Worker", "load_ipython_extension"]


def __getattr__(name):
    if name in ("launch", "get_run", "runs"):
        from . import registry

        return getattr(registry, name)
    if name in ("Run", "Worker"):
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module 'kwnb' has no attribute {name!r}")


def load_ipython_extension(ipython):
    from .magics import load_ipython_extension as load

    load(ipython)
