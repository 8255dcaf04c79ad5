"""The live dashboard: a tab per task (status in words and colour, elapsed time, progress, log
tail), a Stop button, and the chief's curves, redrawn from a background thread.

Only widget values change after the first display, so nothing flickers and updates reach the
right cell whatever cell runs meanwhile. Throttled: at most REFRESH_HZ redraws a second, the
curves at most once every CURVES_SECONDS (longer where drawing them would take more than
CURVES_CPU_SHARE of a core, as on a slow Binder machine), and only when something moved.
"""
from __future__ import annotations

import html
import threading
import time
import weakref

import ipywidgets as widgets

from ..engine.summary import format_summary
from ..engine.tf_messages import is_runtime_line
from ..plotting import LiveCurves, run_series
from ..timeline import timeline_data, timeline_live_png
from .overview import OVERVIEW_CSS, overview_html

REFRESH_HZ = 4
CURVES_SECONDS = 1.5
TIMELINE_SECONDS = 3.0  # a phase changed: redraw, but not more often (a draw costs a few ms, 64 lanes ~20)
TIMELINE_IDLE_SECONDS = 5.0  # nothing changed but the clock: the bars grow
# The kernel shares the CPU with the workers it watches: curves may cost at most this share of a core.
CURVES_CPU_SHARE = 0.05
LOG_LINES = 300
# Readable on JupyterLab's light and dark themes alike; the word is always shown too.
STATUS_COLOURS = {"pending": "#6a4c93", "starting": "#8a6d00", "running": "#1769aa", "finished": "#2e7d32",
                  "failed": "#c62828", "stopped": "#616161"}

_dashboards: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#616161")
    return (f'<span style="background:{colour};color:#fff;padding:1px 7px;border-radius:3px;'
            f'font-weight:600;font-size:0.85em;letter-spacing:0.04em">{status.upper()}</span>')


def curves_gap(draw_cpu_seconds: float) -> float:
    """Seconds until the next curves redraw, given what the last one cost."""
    return max(CURVES_SECONDS, draw_cpu_seconds / CURVES_CPU_SHARE)


def worker_label(worker) -> str:
    return f"{worker.label}: {worker.status}"


def log_html(worker, show_runtime: bool = False) -> str:
    shown = worker.screen.tail(LOG_LINES)
    hidden = worker.screen.total_lines + (1 if worker.screen.current.strip() else 0) - len(shown)
    lines = shown if show_runtime else [line for line in shown if not is_runtime_line(line)]
    note = (f"{hidden} earlier line{'s' * (hidden != 1)} not shown; " if hidden > 0 else "") + f"full log: {worker.log_path}"
    body = html.escape("\n".join(lines)) or "(no output yet)"
    # column-reverse keeps the box scrolled to its newest line, like a terminal, on every redraw.
    return (f'<div style="font-size:0.8em;opacity:0.75">{html.escape(note)}</div>'
            f'<div style="max-height:22em;overflow:auto;display:flex;flex-direction:column-reverse">'
            f'<pre style="flex:none;margin:2px 0;font-size:0.8em;line-height:1.25;'
            f'white-space:pre-wrap;word-break:break-all">{body}</pre></div>')


def diagnoses_html(diagnoses) -> str:
    """The banner above the tabs (and on a task's tab): one line per diagnosis, in words."""
    if not diagnoses:
        return ""
    rows = "".join(f"<div>&#9888; <b>{html.escape(d.kind.replace('_', ' '))}</b>: {html.escape(d.message)}</div>"
                   for d in diagnoses)
    # A translucent red behind the theme's own text colour: readable on light and dark themes alike.
    return (f'<div style="border-left:4px solid #c62828;background:rgba(198,40,40,0.10);padding:3px 8px;'
            f'margin:2px 0;font-size:0.9em;line-height:1.35">{rows}</div>')


def fold_label(worker, shown: bool) -> str:
    count = worker.runtime_lines
    words = f"{count} TensorFlow runtime message{'s' * (count != 1)}"
    return f"{words} shown - hide" if shown else f"{words} hidden - show"


def header_html(worker, diagnoses=()) -> str:
    parts = [badge(worker.status), f"<b>{html.escape(worker_label(worker).split(':')[0])}</b>",
             html.escape(worker.where), f"{worker.elapsed:.1f} s"]
    if worker.returncode is not None:
        parts.append(f"exit code <b>{worker.returncode}</b>")
    if worker.restarts:
        parts.append(f"restarts {worker.restarts}")
    if worker.tf_config:
        parts.append(f"<code>{html.escape(worker.address)}</code>")
    return " &nbsp;·&nbsp; ".join(parts) + diagnoses_html([d for d in diagnoses if d.task == worker.position])


class Dashboard:
    """Widgets showing one Run, kept current by a thread until the run ends."""

    def __init__(self, run, parent=None, print_summary: bool = True):
        self.run = run
        self._parent, self._print_summary = parent, print_summary
        self.title = widgets.HTML()
        self.stop_button = widgets.Button(description="Stop", icon="stop", button_style="danger",
                                          tooltip="Stop every task of this run (TERM, then KILL)")
        self.stop_button.on_click(lambda _: threading.Thread(target=run.stop, daemon=True).start())
        self.banner = widgets.HTML()
        self.headers = [widgets.HTML() for _ in run.workers]
        self.progress = [widgets.FloatProgress(value=0, min=0, max=1, description="", bar_style="info",
                                               layout=widgets.Layout(width="60%")) for _ in run.workers]
        self.progress_labels = [widgets.Label() for _ in run.workers]
        self.logs = [widgets.HTML() for _ in run.workers]
        # TensorFlow's runtime lines are folded away by default; each tab has its own toggle.
        self.folds = [widgets.ToggleButton(value=False, layout=widgets.Layout(width="auto"),
                                           tooltip="TensorFlow's C++ runtime lines (I0000 ..., oneDNN, CUDA notices)")
                      for _ in run.workers]
        for i, fold in enumerate(self.folds):
            fold.observe(lambda _, i=i: self._refresh_tab(i), names="value")
        self.tabs = widgets.Tab(children=[
            widgets.VBox([h, widgets.HBox([p, l]), f, g])
            for h, p, l, f, g in zip(self.headers, self.progress, self.progress_labels, self.folds, self.logs)])
        self.overview = widgets.HTML()
        self.timeline = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", align_self="flex-start",
                                                                          margin="2px 0", display="none"))
        # Hidden until the first PNG (an empty Image is a broken-image icon); never drawn wider than
        # the PNG itself, which would blur it.
        self.curves = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", align_self="flex-start",
                                                                        margin="2px 0", display="none"))
        self.curves_note = widgets.HTML("<i>Curves appear once the chief reports a step or an epoch.</i>")
        # ipywidgets gives every tab a fixed width, which cuts "worker 0 (chief): finished" short.
        tab_width = widgets.HTML("<style>.kwnb-dashboard .widget-tab > .lm-TabBar .lm-TabBar-tab"
                                 "{flex:0 0 auto}" + OVERVIEW_CSS + "</style>", layout=widgets.Layout(display="none"))
        self.widget = widgets.VBox([widgets.HBox([self.title, self.stop_button],
                                                 layout=widgets.Layout(justify_content="space-between")),
                                    self.banner, self.overview, self.tabs, self.curves_note, self.curves,
                                    self.timeline, tab_width])
        self.widget.add_class("kwnb-dashboard")
        self._log_keys = [None] * len(run.workers)
        self.tabs.observe(lambda change: self._refresh_tab(change["new"]), names="selected_index")
        self._curves_key = None
        self._curves_at = 0.0
        self._curves_gap = CURVES_SECONDS
        self._live_curves = LiveCurves(title=f"{run.name} (chief)")
        self._timeline_at = time.monotonic()  # first drawn TIMELINE_SECONDS in, when there is something to see
        self._timeline_gap = TIMELINE_SECONDS
        self._timeline_phases = -1
        self.refresh(force_curves=True)
        self._thread = threading.Thread(target=self._follow, name=f"kwnb-dashboard-{run.name}", daemon=True)
        self._thread.start()

    def refresh(self, force_curves: bool = False) -> None:
        run = self.run
        self._set(self.title, "value", f"{badge(run.status)} <b>{html.escape(run.name)}</b> &nbsp;·&nbsp; "
                  f"{len(run.workers)} tasks &nbsp;·&nbsp; {run.elapsed:.1f} s"
                  + (f" &nbsp;·&nbsp; restarts {run.restarts}" if run.restarts else "")
                  + (f" &nbsp;·&nbsp; {html.escape(run.reason)}" if run.reason else ""))
        self.stop_button.disabled = run.done
        with run._lock:
            diagnoses = list(run.diagnoses)
            marked = {d.task for d in diagnoses}
            titles = tuple(("\u26a0 " if w.position in marked else "") + worker_label(w) for w in run.workers)
            if tuple(self.tabs.titles) != titles:
                self.tabs.titles = titles
            self._set(self.banner, "value", diagnoses_html(diagnoses))
            self._set(self.overview, "value", overview_html(run, diagnoses, badge))
            for i in range(len(run.workers)):
                if i == self.tabs.selected_index or run.done:  # a hidden tab: when it is shown
                    self._refresh_tab(i, diagnoses)
        self._refresh_curves(force_curves)
        self._refresh_timeline(force_curves and run.done)  # at the first display there is nothing to draw yet

    def _refresh_tab(self, i: int | None, diagnoses=None) -> None:
        """One tab: kept current while shown, brought up to date when shown or when its fold is toggled.

        Hidden tabs wait (a tab's log costs ~0.3 ms a redraw, and its header changes every redraw: with
        64 tasks at 4 redraws a second, every tab would cost the kernel 8 % of a core and the browser
        256 messages a second); the overview above shows every task at once. A log is redrawn only when
        its screen moved."""
        if i is None or not 0 <= i < len(self.logs):
            return
        worker = self.run.workers[i]
        with self.run._lock:
            self._set(self.headers[i], "value", header_html(worker, self.run.diagnoses if diagnoses is None else diagnoses))
            fraction, label = worker.metrics.progress()
            if fraction is not None:
                self._set(self.progress[i], "value", fraction)
            bar = {"finished": "success", "failed": "danger", "stopped": "warning"}.get(worker.status, "info")
            self._set(self.progress[i], "bar_style", bar)
            self._set(self.progress_labels[i], "value", label or worker.status)
            screen, shown = worker.screen, self.folds[i].value
            key = (screen.total_lines, screen.current, shown, worker.runtime_lines)
            if self._log_keys[i] != key:
                self._log_keys[i] = key
                self._set(self.folds[i], "description", fold_label(worker, shown))
                self._set(self.logs[i], "value", log_html(worker, show_runtime=shown))

    def _refresh_timeline(self, force: bool) -> None:
        """Redrawn when a phase changes (at most every TIMELINE_SECONDS) and every TIMELINE_IDLE_SECONDS
        as the bars grow; at the end the PNG the run saved is shown as it is, not drawn again."""
        now, run = time.monotonic(), self.run
        phases = sum(len(task.vitals.phases) for task in run.workers)
        due = (phases != self._timeline_phases and now - self._timeline_at >= self._timeline_gap) or \
            now - self._timeline_at >= TIMELINE_IDLE_SECONDS
        if not (force or due):
            return
        cpu = time.thread_time()
        saved = run.folder.timeline
        # No lock: it reads lists the supervisor only appends to.
        png = saved.read_bytes() if run.done and saved.is_file() else _live_timeline(run)
        if png is None:
            return
        self._timeline_phases = phases
        self.timeline.value = png
        self.timeline.layout.display = None
        self._timeline_at = now
        self._timeline_gap = max(TIMELINE_SECONDS, (time.thread_time() - cpu) / CURVES_CPU_SHARE)

    def _refresh_curves(self, force: bool) -> None:
        chief = self.run.chief.metrics
        key = (len(chief.epochs), len(chief.steps), chief.steps[-1]["step"] if chief.steps else None,
               sum(len(task.metrics.epochs) for task in self.run.workers if task.task_type == "evaluator"))
        now = time.monotonic()
        if key == self._curves_key or (not force and now - self._curves_at < self._curves_gap):
            return
        cpu = time.thread_time()
        png = self._live_curves.png(run_series(self.run))
        if png is None:
            return
        self.curves.value = png
        self.curves.layout.display = None
        self.curves_note.value = ""
        self._curves_key, self._curves_at = key, now
        self._curves_gap = curves_gap(time.thread_time() - cpu)

    @staticmethod
    def _set(widget, name: str, value) -> None:
        if getattr(widget, name) != value:  # unchanged values send nothing to the browser
            setattr(widget, name, value)

    def _follow(self) -> None:
        while not self.run.done:
            time.sleep(1 / REFRESH_HZ)
            try:
                self.refresh()
            except Exception:  # a closed comm (kernel shutting down) must not spam tracebacks
                return
        self.refresh(force_curves=True)
        if self._print_summary:
            self._print_final_summary()

    def _print_final_summary(self) -> None:
        """The plain-text account, in the cell that started the run, for anyone not looking at widgets.

        Only where the kernel can route one thread's output to a given cell (ipykernel 7's
        set_thread_parent); elsewhere it would land in whatever cell runs now, so it is left out.
        """
        try:
            from IPython import get_ipython

            shell = get_ipython()
            if shell is None or self._parent is None or not hasattr(shell, "set_thread_parent"):
                return
            tokens = shell.set_thread_parent(self._parent)
            try:
                print(format_summary(self.run), flush=True)
            finally:
                shell.reset_thread_parent(tokens)
        except Exception:
            pass

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self.run)
        return bundle


def _live_timeline(run) -> bytes | None:
    data = timeline_data(run)
    return timeline_live_png(data) if data else None


def settle(run, timeout: float = 10.0) -> None:
    """Let a run's dashboard draw its final state: a headless notebook saves widgets as they are."""
    dashboard = _dashboards.get(run)
    if dashboard is not None:
        dashboard._thread.join(timeout)


def dashboard_for(run, parent=None, print_summary: bool = True) -> Dashboard:
    """One dashboard per run: showing a Run twice shows the same live widgets."""
    if run not in _dashboards:
        _dashboards[run] = Dashboard(run, parent=parent, print_summary=print_summary)
    return _dashboards[run]
