"""What `%load_ext kwnb` does: the magics, a Run shown as its dashboard, and what a first cell will need
prepared in the background (warm interpreters, the painter), so that the first `%%kw_worker` cell starts
as a later one would.

Loading imports neither the engine's processes nor matplotlib: those load when a magic first needs them.
"""
from __future__ import annotations


def load_ipython_extension(ipython) -> None:
    from ..backends.prewarm import prewarm
    from ..engine.live.settings import DEFAULTS
    from ..pictures.painter import painter
    from .kernel_stderr import keep_runtime_lines_out_of_cells
    from .magics import KwnbMagics
    from .runs_magic import PastRunMagics
    from .tensorboard_magic import TensorBoardMagics

    keep_runtime_lines_out_of_cells()  # before the learner's own `import tensorflow`, if the notebook loads kwnb first
    ipython.register_magics(KwnbMagics)
    ipython.register_magics(TensorBoardMagics)
    ipython.register_magics(PastRunMagics)
    # A Run shown in a notebook (a cell's result, display(run)) is its live dashboard. By name, so
    # that loading the extension does not import the engine.
    ipython.display_formatter.ipython_display_formatter.for_type_by_name("kwnb.engine.live.run", "Run", _display_run)
    ipython.display_formatter.ipython_display_formatter.for_type_by_name("kwnb.engine.records.past", "PastRun", _display_run)
    prewarm(DEFAULTS.n)  # warm interpreters for a first `%%kw_worker` cell with the default -n, within the session's limits
    # The drawing process's start and matplotlib import (about 1 CPU-s) now, while the learner reads, not
    # beside a first run's tasks: a first cell showed its dashboard 1.1-1.3 s late waiting for it (issue 31).
    painter().prepare()


def _display_run(run) -> None:
    """A Run, or a past run, shown as its dashboard (an output the run's end updates in place), or where it
    cannot be drawn, as its text account (notebook/show.py)."""
    from .show import show_live

    show_live(run)
