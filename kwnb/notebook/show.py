"""A run shown in a cell: its dashboard, or where the dashboard cannot be drawn, one line saying why and the
text account, never a traceback over a run that goes on unseen.

A learner who sees a red cell runs it again and starts a second run; one whose run trains with nothing on
screen cannot stop it. So `%%kw_worker` builds a dashboard's kinds of widgets (check_widgets) before any
task starts, and a failure there starts nothing; a failure later (showing a run, `%kw_show`) shows the
static account (notebook/static.py) with the magics that wait for and stop the run.
"""
from __future__ import annotations

import ipywidgets as widgets

from .static import static_html
from .widgets_compat import set_tab_titles, widget_bundle


class DashboardUnavailable(Exception):
    """This front end's ipywidgets cannot build the dashboard: one line says why."""


def _why(error: Exception) -> str:
    return f"ipywidgets {widgets.__version__}: {type(error).__name__}: {error}".splitlines()[0]


_widgets_work = [False]  # in this kernel: what the check finds depends on the installed ipywidgets only


def check_widgets() -> None:
    """Build, title and bundle a tab of the dashboard's widget kinds, as showing a run will: raises
    DashboardUnavailable where that fails. Once a kernel, before its first run's tasks start: 30-80 ms
    on a loaded 2-core machine (ipywidgets 8 and 7)."""
    if _widgets_work[0]:
        return
    built = []
    try:
        built += [widgets.HTML(), widgets.FloatProgress(value=0, min=0, max=1, bar_style="info"), widgets.Label(),
                  widgets.ToggleButton(value=False, tooltip="runtime lines"), widgets.HTML(),
                  widgets.Button(description="Stop", tooltip="Stop"), widgets.Image(format="png")]
        header, bar, label, fold, log, stop, image = built
        built.append(widgets.HBox([bar, label]))
        built.append(widgets.VBox([header, built[-1], fold, log]))
        built.append(widgets.Tab(children=[built[-1]]))
        set_tab_titles(built[-1], ("worker 0",))
        built.append(widgets.VBox([stop, image, built[-1]]))
        widget_bundle(built[-1])
        _widgets_work[0] = True
    except Exception as error:
        raise DashboardUnavailable(_why(error)) from error
    finally:
        for widget in built:
            widget.close()


def show_run(run) -> None:
    """The run's dashboard; where it cannot be drawn, why in one line and the run's text account."""
    from IPython.display import display

    from .dashboard import dashboard_for, forget

    try:
        dashboard_for(run).show()
    except Exception as error:
        forget(run)
        live = hasattr(run, "stop") and not run.done
        going = f"; run {run.name!r} goes on: %kw_wait {run.name} waits for it, %kw_stop {run.name} stops it" if live else ""
        print(f"kwnb: the dashboard cannot be shown here ({_why(error)}){going}")
        snapshot = run.snapshot()
        display({"text/html": static_html(snapshot, summary=snapshot.done), "text/plain": repr(run)}, raw=True)
