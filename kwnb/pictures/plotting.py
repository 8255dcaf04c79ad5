"""Training curves as a matplotlib figure: one panel per metric, validation beside training.

Built on `matplotlib.figure.Figure` with the Agg canvas, never pyplot, so drawing from the
supervisor or dashboard thread cannot disturb the notebook's own plots or backend. matplotlib is
imported at the first figure, not with this module: a kernel whose runs report no metrics never pays
its 0.4 CPU-s and 40 MB (benchmarks/README.md, section 3).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from ..engine.records.snapshot import as_snapshot

MAX_PANELS = 4
# A panel whose values span more than this ratio gets a log y-axis: a diverging loss (0.69 -> 1e9 -> 450 on the
# test fit, 2.29 -> 5e10 on issue 29's) drawn linearly reads as zero, i.e. as convergence, after its spike.
# A clean run's loss spans less than 10x.
LOG_SPAN = 1e3
PNG_COMPRESS_LEVEL = 1  # zlib's fastest: 9 % larger than Pillow's default 6, in a third of its time


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


def curve_lines(series: dict[str, dict]) -> dict[str, list[tuple]]:
    """What to draw, apart from how: panel name -> [(line label, xs, ys, style, plot kwargs)]."""
    epoch_rows = [s.get("epochs") or [] for s in series.values()]
    names = metric_names(*epoch_rows) or metric_names(*[s.get("steps") or [] for s in series.values()])
    panels = {}
    for name in names[:MAX_PANELS]:
        panels[name] = [line for label, rows in series.items() for line in _lines(label, rows, name)]
    return panels


def _lines(label: str, rows: dict, name: str) -> list[tuple]:
    lines = []
    steps = [r for r in rows.get("steps") or [] if name in r]
    epochs = rows.get("epochs") or []
    per_epoch = rows.get("steps_per_epoch")
    if steps and per_epoch:
        # Step s of epoch e (global step e*S + s) is drawn at e + s/S, so an epoch's steps end where
        # its epoch mark (at e + 1) stands.
        lines.append((f"{label} (per step)", [r["step"] / per_epoch for r in steps], [r[name] for r in steps],
                      "-", {"alpha": 0.35, "lw": 1}))
    for key, style in ((name, "-o"), ("val_" + name, "--s")):
        points = [(r["epoch"] + 1, r[key]) for r in epochs if key in r]
        if points:
            xs, ys = zip(*points)
            lines.append((f"{label} {key}" if key != name else label, list(xs), list(ys), style, {"ms": 4}))
    return lines


def load_drawing() -> None:
    """Import what a drawing needs: once per process, about 0.5 CPU-s on the machines here (matplotlib,
    its Agg canvas, Pillow). The dashboard calls it before timing a redraw, so that a one-off import is
    not taken for what every redraw costs (it set a 13 s gap between the first two live pictures)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import matplotlib.ticker  # noqa: F401
    import PIL.Image  # noqa: F401


def _figure(panels: dict[str, list[tuple]], title: str) -> tuple["Figure", dict]:
    """The figure, and its lines by (panel, line label) for LiveCurves to move."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(4.2 * len(panels), 3.2), dpi=90, layout="constrained")
    FigureCanvasAgg(figure)
    artists = {}
    for axis, (name, lines) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels.items()):
        for label, xs, ys, style, kwargs in lines:
            artists[name, label] = axis.plot(xs, ys, style, label=label, **kwargs)[0]
        _choose_scale(axis, lines)
        axis.set_title(name)
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        _span_an_epoch(axis)
        axis.grid(alpha=0.3)
        if axis.has_data():
            axis.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    return figure, artists


def _span_an_epoch(axis) -> None:
    """The data's limits, at least one epoch wide: a first epoch's first steps (x 0.005-0.03 of 200 steps) got
    a dozen overlapping tick labels, and a learner sees how far into the first epoch the curve has come."""
    axis.set_autoscalex_on(True)
    axis.relim()
    axis.autoscale_view()
    low, high = axis.get_xlim()
    if high - low < 1:
        axis.set_xlim(min(low, 0), max(high, min(low, 0) + 1))


def _choose_scale(axis, lines: list[tuple]) -> None:
    """A log y-axis when the panel's values are positive and span more than LOG_SPAN, else a linear one."""
    values = [y for line in lines for y in line[2] if y == y and abs(y) != float("inf")]
    wide = bool(values) and min(values) > 0 and max(values) > LOG_SPAN * min(values)
    scale = "log" if wide else "linear"
    if axis.get_yscale() != scale:
        axis.set_yscale(scale)


def curves_figure(series: dict[str, dict], title: str = "") -> "Figure | None":
    """`series` maps a label to {'epochs': rows, 'steps': rows}; None when there is nothing to draw."""
    panels = curve_lines(series)
    return _figure(panels, title)[0] if panels else None


class LiveCurves:
    """The dashboard's curves, redrawn every CURVES_SECONDS while a run trains, in the kernel whose
    CPU the workers share.

    Three savings over a new figure and `savefig` per redraw (about 100 ms each on the 2-core
    machines here; see benchmarks/README.md): the figure is built once while the same lines are
    drawn, only their data moving; it is drawn once and encoded with Pillow, where `savefig` drew
    it twice; and the constrained layout, half of a draw, runs only when the tick labels change
    length, since only then can the margins it computes change. A new metric or line rebuilds.
    """

    def __init__(self, title: str = ""):
        self.title = title
        self._figure: "Figure | None" = None
        self._artists: dict = {}
        self._layout = None
        self._laid_out_for = None

    def png(self, series: dict[str, dict]) -> bytes | None:
        panels = curve_lines(series)
        if not panels:
            return None
        keys = [(name, line[0]) for name, lines in panels.items() for line in lines]
        if self._figure is None or keys != list(self._artists):
            self._figure, self._artists = _figure(panels, self.title)
            self._layout = self._figure.get_layout_engine()
            self._figure.set_layout_engine("none")
            self._laid_out_for = None
        else:
            for name, lines in panels.items():
                for label, xs, ys, _style, _kwargs in lines:
                    self._artists[name, label].set_data(xs, ys)
            for axis, lines in zip(self._figure.axes, panels.values()):
                _choose_scale(axis, lines)
                _span_an_epoch(axis)
        labels = self._tick_label_lengths()
        if labels != self._laid_out_for:
            self._layout.execute(self._figure)
            self._laid_out_for = labels
        return png_bytes(self._figure)

    def _tick_label_lengths(self) -> tuple:
        """What the layout depends on that data can change: how long each axis's tick labels are."""
        lengths = []
        for axis in self._figure.axes:
            for side in (axis.xaxis, axis.yaxis):
                formatter = side.get_major_formatter()
                labels = formatter.format_ticks(side.get_majorticklocs())
                lengths.append((max(map(len, labels), default=0), formatter.get_offset()))
        return tuple(lengths)


def run_series(run, positions: list[int] | None = None) -> dict[str, dict]:
    """The chief's curves (or those of `positions`), and a sidecar evaluator's per-checkpoint metrics
    overlaid on them: its checkpoint k is drawn at epoch k, where the chief's epoch k ends. `run` is a
    RunSnapshot (engine/records/snapshot.py) or anything with `snapshot()`."""
    run, positions = as_snapshot(run), positions or [0]
    series = {
        (run.name if len(positions) == 1 else f"{run.name} task {p}"): {
            "epochs": list(run.tasks[p].epochs), "steps": list(run.tasks[p].steps),
            "steps_per_epoch": run.tasks[p].steps_per_epoch}
        for p in positions
    }
    for task in run.workers:
        if task.task_type == "evaluator" and task.position not in positions and task.epochs:
            series[f"{task.id} (checkpoints)"] = {"epochs": list(task.epochs)}
    return series


def png_bytes(figure: "Figure") -> bytes:
    """The figure as PNG, the same pixels as `savefig` (tests/test_plotting.py) in about half its time: drawn
    once (savefig draws twice with a layout engine) and encoded at zlib level 1 (a run's curves.png: 0.36 s
    -> 0.16 s, 27 -> 30 kB; the run's end waits for it, issue 31)."""
    from PIL import Image

    canvas = figure.canvas
    canvas.draw()
    buffer = io.BytesIO()
    Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
        buffer, format="png", compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def save_curves(series: dict[str, dict], title: str, path: Path) -> Path | None:
    figure = curves_figure(series, title=title)
    if figure is None:
        return None
    Path(path).write_bytes(png_bytes(figure))
    return path
