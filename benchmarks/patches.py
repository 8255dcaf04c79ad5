"""The dashboard's curves as kwnb drew them before LiveCurves, applied as a monkeypatch to measure
what the change bought.

kwnb itself is not edited here: the patch is applied inside the benchmark's kernel for the runs
labelled "curves: new figure + savefig per redraw (before)" (profile.kernel_ab), and undone right
after. Earlier experiments that kwnb adopted (the metrics prefilter, the throttled descendant scan,
reading to the end at exit, probing ports until they open, exec'ing the script instead of runpy)
are in kwnb itself and no longer here.

Before: Dashboard._refresh_curves built a new matplotlib figure and called savefig (which draws it
twice, constrained layout each time) every CURVES_SECONDS (1.5 s) while the chief reported steps:
the largest share of the kernel's CPU while it trained. Now (kwnb/pictures/plotting.py LiveCurves) the figure
is kept, drawn once, laid out only when tick labels change length, and the redraw interval grows
if the curves would take more than CURVES_CPU_SHARE of a core; and since issue 31 the kernel's painter
(kwnb/pictures/painter.py) draws them in a process of its own, so the before side also turns the painter
off (it drew in the kernel). Without a dashboard, or for a worker
that prints no Keras progress (no curves to draw), both sides run the same code.
"""
from __future__ import annotations

import contextlib

from .hooks import CURVES_CPU_SHARE, LIVE_CURVES, LIVE_CURVES_PNG, patched

_saved: dict[str, contextlib.ExitStack] = {}


class NewFigureEachRedraw:
    """LiveCurves' interface, drawn the way kwnb did before it."""

    def __init__(self, title: str = ""):
        self.title = title

    def png(self, series: dict) -> bytes | None:
        from kwnb.pictures.plotting import curves_figure, png_bytes

        figure = curves_figure(series, title=self.title)
        return None if figure is None else png_bytes(figure)


def apply_curves_before() -> None:
    if "curves" not in _saved:
        _saved["curves"] = contextlib.ExitStack()
        _saved["curves"].enter_context(patched(LIVE_CURVES, NewFigureEachRedraw))
        _saved["curves"].enter_context(patched(CURVES_CPU_SHARE, 1.0))  # no cap: a redraw never took a second
        _saved["curves"].enter_context(patched(LIVE_CURVES_PNG, lambda *args: None))  # drawn in the kernel


def undo_curves_before() -> None:
    if "curves" in _saved:
        _saved.pop("curves").close()
