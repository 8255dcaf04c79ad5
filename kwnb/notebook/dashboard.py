"""The live dashboard: a tab per task (status in words and colour, elapsed time, progress, log
tail), a Stop button, and the chief's curves, redrawn from a background thread.

Every redraw renders a RunSnapshot (engine/records/snapshot.py), an immutable copy the run hands out, so
no HTML or PNG is made while holding the run's lock. A past run (`kwnb.open_run`) gives the same
snapshot from its folder, so it is shown by the same dashboard, drawn once.

Only widget values change after the first display, so nothing flickers and updates reach the
right cell whatever cell runs meanwhile. Throttled: at most REFRESH_HZ redraws a second; the curves
(notebook/curves_view.py) less often, in a thread of their own.

A second output carries a static account (notebook/static.py) for pages whose widgets do not
render, sent again through update_display_data when the run ends; the widgets hide it wherever they render.
"""
from __future__ import annotations

import html
import threading
import time
import uuid
import weakref

import ipywidgets as widgets

from ..engine.records.summary import format_summary
from ..pictures.outputs import DRAW_TIMEOUT, pictures_ready
from ..pictures.painter import forget_live_curves
from ..pictures.timeline import timeline_data, timeline_png
from .curves_view import CURVES_CPU_SHARE, CurvesView
from .overview import OVERVIEW_CSS, STATUS_COLOURS, diagnoses_html, faults, overview_html
from .static import hide_account_css, missing_html, static_html, title_html
from .task_tab import fold_label, header_html, log_html, worker_label
from .widgets_compat import CLASSIC_STOP_CSS, set_tab_titles, tab_titles, widget_bundle

REFRESH_HZ = 4
TIMELINE_SECONDS = 3.0  # a phase changed: redraw, but not more often (a draw costs a few ms, 64 lanes ~20)
TIMELINE_IDLE_SECONDS = 5.0  # nothing changed but the clock: the bars grow
# What to look at, under the first live dashboard a kernel shows (once a session: a learner reads it once, and
# every later run's dashboard looks the same). Not in the static account: a published page has no tabs.
GUIDE = ("What to look at: the table, where each task is · a tab per task, its log · the timeline, who waited "
         "for whom · if something goes wrong, a red banner here says what, with the fix")
_guide_shown = [False]  # in this kernel session

_dashboards: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class Dashboard:
    """Widgets showing one run, kept current by a thread until it ends; a past run is drawn once.

    `source` is a Run or a past run (engine/records/past.py): anything with `snapshot()` and `done`."""

    def __init__(self, source, parent=None, follow: bool = True):
        self.run = source
        self.display_id = f"kwnb-{uuid.uuid4().hex}"  # the widgets' output, updated in place when the run ends
        self.account_id = f"{self.display_id}-account"  # the static account's output, and the class that hides it
        # Ended (its pictures saved) before this snapshot, as a past run always is: drawn final below,
        # with no end to send again (a second bundle to the page, printed twice in a terminal).
        ended_before = source.done
        self._snapshot = snapshot = source.snapshot()
        tasks = snapshot.tasks
        self._curves = CurvesView(self.display_id, f"{snapshot.name} (chief)")
        self._make_widgets(source, len(tasks))
        self._every_tab = not follow  # followed from a cell (live_mode.py): no tab click reaches the kernel meanwhile
        self._timeline_at = time.monotonic()  # first drawn TIMELINE_SECONDS in, when there is something to see
        self._timeline_gap = TIMELINE_SECONDS
        self._timeline_phases = -1
        self._drawing = threading.RLock()  # the follower thread and the run's end draw one at a time
        self._log_keys = [None] * len(tasks)
        self.tabs.observe(lambda change: self._refresh_tab(change["new"]), names="selected_index")
        self._final_sent = ended_before
        self._shown = False
        self._summary_below = False  # %kw_wait prints the summary under it: the account leaves its copy out
        self._summary_sent = False  # the account last sent carried the summary
        self._parents: list[dict] = [parent] if parent else []  # the cells that showed it (see _update_display)
        self.refresh(force_curves=True, snapshot=snapshot)
        self._thread = None  # or the cell follows it (live_mode.py), where its Stop would wait for the cell's end
        if follow:
            self._thread = threading.Thread(target=self.follow, name=f"kwnb-dashboard-{snapshot.name}", daemon=True)
            self._thread.start()
        else:
            self.stop_button.layout.display = "none"

    def _make_widgets(self, source, count: int) -> None:
        """The title and Stop, the guide line, the banner, the overview, a tab per task, the curves and the timeline."""
        self.title = widgets.HTML()
        self.stop_button = widgets.Button(description="Stop", icon="stop", button_style="danger",
                                          tooltip="Stop every task of this run (TERM, then KILL)")
        if hasattr(source, "stop"):
            self.stop_button.on_click(lambda _: threading.Thread(target=source.stop, daemon=True).start())
        self.banner = widgets.HTML()
        self.banner.add_class("kwnb-banner")
        self.guide = widgets.HTML(layout=widgets.Layout(display="none"))  # the first live dashboard's: show()
        self.guide.add_class("kwnb-guide")
        self._make_tabs(count)
        self.overview = widgets.HTML()
        # Hidden until the first PNG, as the curves' image (curves_view.py).
        self.timeline = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", align_self="flex-start",
                                                                          margin="2px 0", display="none"))
        self.curves, self.curves_note = self._curves.image, self._curves.note
        # ipywidgets gives every tab a fixed width, which cuts "worker 0 (chief): finished" short. Where the
        # widgets render, this style also hides their static account (a page without them never gets the rule).
        tab_width = widgets.HTML("<style>.kwnb-dashboard .widget-tab > .lm-TabBar .lm-TabBar-tab"
                                 "{flex:0 0 auto}" + OVERVIEW_CSS + CLASSIC_STOP_CSS + hide_account_css(self.account_id)
                                 + "</style>",
                                 layout=widgets.Layout(display="none"))
        self.widget = widgets.VBox([widgets.HBox([self.title, self.stop_button],
                                                 layout=widgets.Layout(justify_content="space-between")),
                                    self.guide, self.banner, self.overview, self.tabs, self.curves_note, self.curves,
                                    self.timeline, tab_width])
        self.widget.add_class("kwnb-dashboard")

    def _make_tabs(self, count: int) -> None:
        """A tab per task: its header, progress bar, runtime-lines toggle and log."""
        self.headers = [widgets.HTML() for _ in range(count)]
        self.progress = [widgets.FloatProgress(value=0, min=0, max=1, description="", bar_style="info",
                                               layout=widgets.Layout(width="60%")) for _ in range(count)]
        self.progress_labels = [widgets.Label() for _ in range(count)]
        self.logs = [widgets.HTML() for _ in range(count)]
        # TensorFlow's runtime lines are folded away by default; each tab has its own toggle.
        self.folds = [widgets.ToggleButton(value=False, layout=widgets.Layout(width="auto"),
                                           tooltip="TensorFlow's C++ runtime lines (I0000 ..., oneDNN, CUDA notices)")
                      for _ in range(count)]
        for i, fold in enumerate(self.folds):
            fold.observe(lambda _, i=i: self._refresh_tab(i), names="value")
        self.tabs = widgets.Tab(children=[
            widgets.VBox([h, widgets.HBox([p, l]), f, g])
            for h, p, l, f, g in zip(self.headers, self.progress, self.progress_labels, self.folds, self.logs)])

    def refresh(self, force_curves: bool = False, snapshot=None) -> None:
        # Taken before the drawing lock, never under it: no thread holds one lock while waiting for the other.
        snapshot = snapshot or self.run.snapshot()
        with self._drawing:
            if snapshot.taken_at < self._snapshot.taken_at:
                return  # another thread drew a newer one meanwhile (the run's end): never step back
            self._snapshot = run = snapshot  # rendered below without the run's lock
            self._set(self.title, "value", title_html(run))
            self.stop_button.disabled = run.done or not hasattr(self.run, "stop")
            diagnoses = run.diagnoses
            marked = {d.task for d in faults(diagnoses)}
            titles = tuple(("\u26a0 " if w.position in marked else "") + worker_label(w) for w in run.tasks)
            if tab_titles(self.tabs) != titles:
                set_tab_titles(self.tabs, titles)
            self._set(self.banner, "value", missing_html(run.missing) + diagnoses_html(diagnoses))
            self._set(self.overview, "value", overview_html(run, diagnoses))
            for i in range(len(run.tasks)):
                if i == self.tabs.selected_index or run.done or self._every_tab:  # a hidden tab: when shown
                    self._refresh_tab(i)
            self._curves.refresh(run, force_curves)
            self._refresh_timeline(run, force_curves and run.done)  # at the first display there is nothing to draw yet

    def _refresh_tab(self, i: int | None) -> None:
        """One tab, from the last snapshot: kept current while shown, brought up to date when shown or
        when its fold is toggled.

        Hidden tabs wait (a tab's log costs ~0.3 ms a redraw, and its header changes every redraw: with
        64 tasks at 4 redraws a second, every tab would cost the kernel 8 % of a core and the browser
        256 messages a second); the overview above shows every task at once. A log is redrawn only when
        its screen moved."""
        if i is None or not 0 <= i < len(self.logs):
            return
        with self._drawing:
            worker, diagnoses = self._snapshot.tasks[i], self._snapshot.diagnoses
            self._set(self.headers[i], "value", header_html(worker, diagnoses))
            fraction, label = worker.progress
            if fraction is not None:
                self._set(self.progress[i], "value", fraction)
            bar = {"finished": "success", "failed": "danger", "stopped": "warning"}.get(worker.status, "info")
            self._set(self.progress[i], "bar_style", bar)
            self._set(self.progress_labels[i], "value", label or worker.status)
            shown = self.folds[i].value
            key = (worker.total_lines, worker.tail[-1:], shown, worker.runtime_lines)
            if self._log_keys[i] != key:
                self._log_keys[i] = key
                # Two widgets, so two messages: the browser can draw between them. The toggle must never
                # say "hidden" while the log still shows runtime lines: when they fold, the log goes first.
                label = (self.folds[i], "description", fold_label(worker, shown))
                log = (self.logs[i], "value", log_html(worker, show_runtime=shown))
                for widget, name, value in (label, log) if shown else (log, label):
                    self._set(widget, name, value)

    def _refresh_timeline(self, run, force: bool) -> None:
        """Redrawn when a phase changes (at most every TIMELINE_SECONDS) and every TIMELINE_IDLE_SECONDS
        as the bars grow; at the end the PNG the run saved is shown as it is, not drawn again."""
        now = time.monotonic()
        phases = sum(len(task.phases) for task in run.tasks)
        due = (phases != self._timeline_phases and now - self._timeline_at >= self._timeline_gap) or \
            now - self._timeline_at >= TIMELINE_IDLE_SECONDS
        if not (force or due):
            return
        cpu = time.thread_time()
        saved = run.timeline_path if run.done else None
        png = saved.read_bytes() if saved else _live_timeline(run)
        if png is None:
            return
        self._timeline_phases = phases
        self.timeline.value = png
        self.timeline.layout.display = None
        self._timeline_at = now
        self._timeline_gap = max(TIMELINE_SECONDS, (time.thread_time() - cpu) / CURVES_CPU_SHARE)

    @staticmethod
    def _set(widget, name: str, value) -> None:
        if getattr(widget, name) != value:  # unchanged values send nothing to the browser
            setattr(widget, name, value)

    def follow(self) -> None:
        # The run is done when its tasks have ended; its pictures follow (pictures/outputs.py), and the
        # final account shows them: `settle` (%kw_wait, --wait) waits for this thread, wait() does not.
        while not self.run.done:
            self.run.wait(1 / REFRESH_HZ)  # wakes at the end at once: a --wait cell waits for the final state
            try:
                self.refresh()
            except Exception:  # a closed comm (kernel shutting down) must not spam tracebacks
                return
        pictures_ready(self.run)
        self._at_end()

    def _at_end(self) -> None:
        """The final state, drawn once, with the run's pictures, and the output's static account brought up to date."""
        with self._drawing:
            if self._final_sent:
                return
            self._final_sent = True
            self._curves.settle(DRAW_TIMEOUT)  # a live draw still going: its picture is not the end's
            self.refresh(force_curves=True)
            forget_live_curves(self.display_id)
            if self._shown:
                try:
                    self._update_display()
                except Exception:  # a closed comm or kernel at exit: the widgets already show the end
                    pass

    def show(self) -> None:
        """Display the dashboard: the widgets' output, then the static account's, each with its display_id,
        which the run's end updates."""
        from IPython import get_ipython
        from IPython.display import display

        shell = get_ipython()
        parent = shell.get_parent() if shell is not None and hasattr(shell, "get_parent") else None
        if parent and parent not in self._parents:
            self._parents.append(parent)
        if shell is not None and settle_ended not in shell.events.callbacks["post_run_cell"]:
            shell.events.register("post_run_cell", settle_ended)
        self._shown = True
        self._guide_once()
        display(self._bundle(), raw=True, display_id=self.display_id)
        display(self._account_bundle(), raw=True, display_id=self.account_id)

    def summary_below(self, below: bool = True) -> None:
        """The run's summary is printed as text below (%kw_wait, --wait): the account leaves its folded copy
        out, and is sent again if it had been sent with it, so that a page without widgets shows it once.
        Said before the end, the final account goes without it at once; `below=False` takes it back (a wait
        interrupted or timed out prints no final summary)."""
        with self._drawing:
            self._summary_below = below
            resend = self._shown and self._summary_sent == below and (below or self._final_sent)
        if resend:
            try:
                self._update_display()
            except Exception:  # a closed comm or kernel at exit: the summary is printed anyway
                pass

    def _guide_once(self) -> None:
        """The line that says what to look at, on the first live run's dashboard this kernel shows."""
        if _guide_shown[0] or self.run.done or not hasattr(self.run, "stop"):  # a past run, or one that ended
            return
        _guide_shown[0] = True
        self.guide.value = f'<div style="font-size:0.85em;opacity:0.8">{html.escape(GUIDE)}</div>'
        self.guide.layout.display = None

    def _update_display(self) -> None:
        """Send the final bundles to every output showing this dashboard (update_display_data).

        Twice where needed, as front ends route it differently: nbclient (and the classic Notebook)
        apply an update whatever cell it comes from, but nbclient reads only the messages of the cell
        it is running; a front end that applies an update only in the output area of the cell it comes
        from gets it from each cell that showed the dashboard too (ipykernel 7's set_thread_parent).
        JupyterLab 4 with ipykernel 7 applies both where the cell running then is in the same notebook:
        the end is drawn twice, 72 ms apart (measured: docs/testing.md)."""
        from IPython import get_ipython
        from IPython.display import publish_display_data

        outputs = [(self._bundle(), self.display_id), (self._account_bundle(), self.account_id)]
        shell = get_ipython()

        def publish():
            for data, display_id in outputs:
                publish_display_data(data, {}, transient={"display_id": display_id}, update=True)
        publish()  # from the cell running now, or the last one run
        current = (getattr(shell, "parent_header", None) or {}).get("msg_id")
        for parent in self._parents if hasattr(shell, "set_thread_parent") else []:
            if parent.get("header", {}).get("msg_id") == current:
                continue
            token = shell.set_thread_parent(parent)
            try:
                publish()
            finally:
                shell.reset_thread_parent(token)

    def _bundle(self) -> dict:
        """The widget view, the summary for terminals, and an empty text/html: a page that draws no widgets
        shows the account output below instead, once (nbconvert, GitHub and Markdown pick text/html first)."""
        bundle = widget_bundle(self.widget)
        with self._drawing:
            snapshot = self._snapshot
        bundle["text/html"] = ""
        bundle["text/plain"] = format_summary(snapshot) if snapshot.done else repr(self.run)
        return bundle

    def _account_bundle(self) -> dict:
        """The static account (notebook/static.py) alone, in an element the widgets' style hides."""
        with self._drawing:
            snapshot = self._snapshot
            curves = self.curves.value if snapshot.done else None
            timeline = self.timeline.value if snapshot.done else None
            summary = snapshot.done and not self._summary_below
            self._summary_sent = summary
        account = static_html(snapshot, curves or None, timeline or None, summary=summary)
        return {"text/html": f'<div class="{self.account_id}">{account}</div>'}

    def _repr_mimebundle_(self, **kwargs):
        return self._bundle()


def _live_timeline(run) -> bytes | None:
    data = timeline_data(run)
    return timeline_png(data) if data else None


def settle(run, timeout: float = 10.0 + DRAW_TIMEOUT) -> None:
    """Let a run's dashboard draw its final state, its pictures drawn: a headless notebook saves widgets as they are."""
    dashboard = _dashboards.get(run)
    if dashboard is not None and dashboard._thread is not None:  # a cell that followed it saw its end
        dashboard._thread.join(timeout)


def summary_printed_below(run, below: bool = True) -> None:
    """The run's summary is, or will be, printed as text (%kw_wait): its dashboard, if shown, does not repeat it."""
    dashboard = _dashboards.get(run)
    if dashboard is not None:
        dashboard.summary_below(below)


def settle_ended(_result=None) -> None:
    """At the end of every cell (IPython's post_run_cell): the final state of each shown dashboard whose run
    ended meanwhile, pictures included, sent from that cell. A headless notebook (nbclient) reads only the
    messages of the cell it runs and saves after the last one: a last cell `run.wait()`, which returns when
    the tasks have ended, before the pictures, would leave the account unfinished (%kw_wait settles itself)."""
    for run, dashboard in list(_dashboards.items()):
        if run.done and dashboard._shown and not dashboard._final_sent and dashboard._thread is not None:
            dashboard._thread.join(10.0 + DRAW_TIMEOUT)


def forget(run) -> None:
    """A dashboard that could not be shown: the next attempt builds its own."""
    _dashboards.pop(run, None)


def made_dashboard(run) -> Dashboard | None:
    """The run's dashboard if one was made (and not forgotten), without making one."""
    return _dashboards.get(run)


def dashboard_for(run, parent=None, follow: bool = True) -> Dashboard:
    """One dashboard per run: showing a Run twice shows the same live widgets. `follow=False`: the caller keeps
    it current (live_mode.py)."""
    if run not in _dashboards:
        _dashboards[run] = Dashboard(run, parent=parent, follow=follow)
    return _dashboards[run]
