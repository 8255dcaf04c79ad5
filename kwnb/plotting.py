"""Training curves as a matplotlib figure: one panel per metric, validation beside training.

Built on `matplotlib.figure.Figure` with the Agg canvas, never pyplot, so drawing from the
supervisor or dashboard thread cannot disturb the notebook's own plots or backend.
"""
from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def metric_names(*histories: list[dict]) -> list[str]:
    """Base metric names (`loss`, `accuracy`), a `val_` twin shares its panel."""
    names: list[str] = []
    for history in histories:
        for row in history:
            for key in row:
                base = key[4:] if key.startswith("val_") else key
                if key not in ("epoch", "step", "time") and base not in names:
                    names.append(base)
    return names


def curves_figure(series: dict[str, dict], title: str = "") -> Figure | None:
    """`series` maps a label to {'epochs': rows, 'steps': rows}; None when there is nothing to draw."""
    epoch_rows = [s.get("epochs") or [] for s in series.values()]
    names = metric_names(*epoch_rows) or metric_names(*[s.get("steps") or [] for s in series.values()])
    if not names:
        return None
    names = names[:4]
    figure = Figure(figsize=(4.2 * len(names), 3.2), dpi=90, layout="constrained")
    FigureCanvasAgg(figure)
    for axis, name in zip(figure.subplots(1, len(names), squeeze=False)[0], names):
        for label, rows in series.items():
            _draw(axis, label, rows, name)
        axis.set_title(name)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        if axis.has_data():
            axis.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure


def _draw(axis, label: str, rows: dict, name: str) -> None:
    steps = [r for r in rows.get("steps") or [] if name in r]
    epochs = rows.get("epochs") or []
    per_epoch = rows.get("steps_per_epoch")
    if steps and per_epoch:
        # Step s of epoch e (global step e*S + s) is drawn at e + s/S, so an epoch's steps end where
        # its epoch mark (at e + 1) stands.
        axis.plot([r["step"] / per_epoch for r in steps], [r[name] for r in steps], alpha=0.35, lw=1,
                  label=f"{label} (per step)")
    for key, style in ((name, "-o"), ("val_" + name, "--s")):
        points = [(r["epoch"] + 1, r[key]) for r in epochs if key in r]
        if points:
            axis.plot(*zip(*points), style, ms=4, label=f"{label} {key}" if key != name else label)


def run_series(run, positions: list[int] | None = None) -> dict[str, dict]:
    positions = positions or [0]
    return {
        (run.name if len(positions) == 1 else f"{run.name} task {p}"): {
            "epochs": run.history(p), "steps": run.step_history(p),
            "steps_per_epoch": run.workers[p].metrics.steps_per_epoch}
        for p in positions
    }


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def save_curves(run, path: Path) -> Path | None:
    figure = curves_figure(run_series(run), title=f"{run.name} (chief)")
    if figure is None:
        return None
    figure.savefig(path)
    return path
