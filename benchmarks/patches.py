"""An open experiment on kwnb, applied as a monkeypatch to measure its effect.

kwnb itself is not edited here: the patch is applied inside the benchmark's kernel for the runs
labelled "dashboard curves every 5 s (experiment)" (profile.kernel_ab), and undone right after.
Earlier experiments that kwnb adopted (the metrics prefilter, the throttled descendant scan,
reading to the end at exit, probing ports until they open, exec'ing the script instead of runpy)
are in kwnb itself and no longer here. What is still open:

- Dashboard._refresh_curves (kwnb/dashboard.py) renders a matplotlib PNG every CURVES_SECONDS
  (1.5 s) while the chief reports steps: the largest share of the kernel's CPU while it trains.
  The experiment redraws them every 5 s instead. It changes nothing without a dashboard, nor for
  a worker that prints no Keras progress (no curves to draw).
"""
from __future__ import annotations

_saved: dict[str, object] = {}


def apply_curves_interval(seconds: float = 5.0) -> None:
    import kwnb.dashboard as dashboard

    if "curves" not in _saved:
        _saved["curves"] = dashboard.CURVES_SECONDS
        dashboard.CURVES_SECONDS = seconds


def undo_curves_interval() -> None:
    import kwnb.dashboard as dashboard

    if "curves" in _saved:
        dashboard.CURVES_SECONDS = _saved.pop("curves")
