"""What a finished run leaves in its folder for people to read: curves.png, timeline.png and summary.txt.

`kwnb.launch` (kwnb/api.py) registers `write_outputs` as the run's on_end callback, so the engine
announces the end and never imports plotting; matplotlib loads only when a run ends.
"""
from __future__ import annotations

from .engine.summary import format_summary


def write_outputs(run) -> None:
    """curves.png (when there is something to plot) and timeline.png, then summary.txt, which names them."""
    snapshot = run.snapshot()
    try:
        from .plotting import save_curves

        save_curves(snapshot, run.folder.curves)
    except Exception as error:  # curves are a bonus; a broken plot must not hide the result
        run.notes.append(f"could not save curves: {error}")
    try:
        from .timeline import save_timeline

        save_timeline(snapshot, run.folder.timeline)
    except Exception as error:
        run.notes.append(f"could not save the timeline: {error}")
    run.folder.summary.write_text(format_summary(run) + "\n")
