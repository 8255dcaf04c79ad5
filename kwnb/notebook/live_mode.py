"""Where the dashboard is kept current from: a thread of its own (the cell returns at once), or the cell's own
thread, which then waits for the run (Colab).

Colab's front end paints only what the running cell sends: widgets changed from a background thread stay as
first drawn (googlecolab/colabtools#3373, open since 2023), and third-party widgets need its custom widget
manager (`google.colab.output.enable_custom_widget_manager()`). There, `%%kw_worker` keeps its cell running
and redraws the dashboard from that cell's thread until the run ends; interrupting the cell (its stop button)
stops the run. Every widget change then comes from the cell's execution, with the cell's parent header, which
is also what ipykernel 7 needs of output from a thread it did not start (ipywidgets#4020). Meanwhile the
kernel handles no other message (ipykernel runs one shell request at a time): the Stop button and a click on
another tab would wait for the cell's end, so the button is hidden and every tab is kept current.

Chosen by itself (on Colab, the cell), or by `KWNB_LIVE`: `cell`, `thread`, or `auto` (the default). The
cell's side is `follow_in_cell` (notebook/show.py).
"""
from __future__ import annotations

import importlib.util
import os
import sys

from ..errors import KwnbError

LIVE_ENV = "KWNB_LIVE"
MODES = ("auto", "cell", "thread")
STOP_HINT = "interrupt this cell (its stop button, or Kernel > Interrupt) to stop the run"
_manager_enabled = [False]  # in this kernel session


def on_colab() -> bool:
    """Colab's kernel imports google.colab at its start; a runtime that has it importable is Colab's too."""
    if "google.colab" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):  # no `google` package at all
        return False


def live_mode() -> str:
    """`cell` or `thread`: KWNB_LIVE if it says one, else `cell` on Colab and `thread` elsewhere."""
    chosen = os.environ.get(LIVE_ENV, "auto").strip().lower() or "auto"
    if chosen not in MODES:
        raise KwnbError(f"{LIVE_ENV} must be one of {', '.join(MODES)}, not {chosen!r}")
    if chosen == "auto":
        return "cell" if on_colab() else "thread"
    return chosen


def enable_widget_manager() -> None:
    """On Colab, its custom widget manager, once a session, before the first dashboard is shown."""
    if _manager_enabled[0] or not on_colab():
        return
    from google.colab import output  # only where on_colab() found it

    output.enable_custom_widget_manager()
    _manager_enabled[0] = True
