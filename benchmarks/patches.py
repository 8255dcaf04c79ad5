"""Changes to kwnb that a profile suggests, applied as monkeypatches to measure their effect.

kwnb itself is not edited here: each patch is applied inside one process (this one, or the
benchmark's kernel) for the runs labelled "patched", and undone right after. Patches that kwnb
adopted (the metrics prefilter, the throttled descendant scan, reading to the end at exit, probing
ports until they open, exec'ing the script instead of runpy) are in kwnb itself now and no longer
here, so "patched" measures only what is still open:

- Dashboard._refresh_curves (kwnb/dashboard.py) renders a matplotlib PNG every CURVES_SECONDS
  (1.5 s) while the chief reports steps: the largest share of the kernel's CPU while it trains.
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


# Used only by profile.py's A/B rows, which predate kwnb adopting both changes: today both sides of
# those rows run the same code (a check that the adopted change holds), to be retired with them.
def apply_scan_prefilter() -> None:
    from kwnb.metrics import MetricsParser

    _saved.setdefault("scan", MetricsParser._scan)


def undo_scan_prefilter() -> None:
    _saved.pop("scan", None)


def apply_descendant_throttle() -> None:
    _saved.setdefault("descendants", True)


def undo_descendant_throttle() -> None:
    _saved.pop("descendants", None)


ALL = [(apply_curves_interval, undo_curves_interval)]


def apply_all() -> None:
    for apply, _ in ALL:
        apply()


def undo_all() -> None:
    for _, undo in reversed(ALL):
        undo()
