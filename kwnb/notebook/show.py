"""A run shown in a cell: its dashboard, or where the dashboard cannot be drawn, one line saying why and the
text account, never a traceback over a run that goes on unseen.

A learner who sees a red cell runs it again and starts a second run; one whose run trains with nothing on
screen cannot stop it. So `%%kw_worker` checks that this ipywidgets has what the dashboard needs
(check_widgets) before any task starts, and where it has not, starts nothing; a failure later (showing a
run, `%kw_show`) shows the static account (notebook/static.py) with the magics that wait for and stop it.
Where the front end paints only what the running cell sends (Colab), the cell follows the run instead of
returning (`follow_in_cell`; notebook/live_mode.py says why and when).
"""
from __future__ import annotations

from contextlib import contextmanager

import ipywidgets as widgets

from .live_mode import STOP_HINT, enable_widget_manager, live_mode
from .static import static_html
from .widgets_compat import unbridged


class DashboardUnavailable(Exception):
    """This front end's ipywidgets cannot build the dashboard: one line says why."""


def _why(error: Exception) -> str:
    return f"ipywidgets {widgets.__version__}: {type(error).__name__}: {error}".splitlines()[0]


def check_widgets() -> None:
    """Raises DashboardUnavailable where this ipywidgets lacks what the dashboard needs (widgets_compat.py),
    before a run's tasks start. No widget is made: its state would stay in a notebook nbclient saves."""
    missing = unbridged()
    if missing:
        raise DashboardUnavailable(f"ipywidgets {widgets.__version__} has no {' and no '.join(missing)}")


def show_run(run) -> bool:
    """The run's dashboard (True); where it cannot be drawn, why in one line and the run's text account."""
    from IPython.display import display

    from .dashboard import dashboard_for, forget

    try:
        enable_widget_manager()  # on Colab, before its first widget
        dashboard_for(run).show()
        return True
    except Exception as error:
        forget(run)
        live = hasattr(run, "stop") and not run.done
        going = f"; run {run.name!r} goes on: %kw_wait {run.name} waits for it, %kw_stop {run.name} stops it" if live else ""
        print(f"kwnb: the dashboard cannot be shown here ({_why(error)}){going}")
        snapshot = run.snapshot()
        display({"text/html": static_html(snapshot, summary=snapshot.done), "text/plain": repr(run)}, raw=True)
        return False


def show_live(run) -> None:
    """A run shown where this front end keeps it current: a run of this kernel that goes on is followed from the
    cell where the front end paints only what the running cell sends (Colab; `%kw_show`, a Run as a cell's
    result), else shown with updates from the dashboard's thread; a past or finished run as it ended."""
    if hasattr(run, "stop") and not run.done and live_mode() == "cell":
        with stopped_if_interrupted(run):
            follow_in_cell(run)
    else:
        show_run(run)


@contextmanager
def stopped_if_interrupted(run):
    """Around everything a cell does for a run it follows, from the run's start: interrupted anywhere (its notes,
    the dashboard's making, the following), the run is stopped (TERM, then KILL after its grace), the final state
    drawn if a dashboard was made, and the interrupt raised again so that the cells queued after this one do not
    run. No run goes on behind an interrupted cell."""
    from .dashboard import made_dashboard

    try:
        yield
    except KeyboardInterrupt:
        print(f"kwnb: interrupted; stopping run {run.name!r}")
        run.stop()
        dashboard = made_dashboard(run)
        if dashboard is not None:
            dashboard.follow()  # the final state, from this cell
        raise


def follow_in_cell(run, summary_below: bool = False) -> None:
    """Show the run's dashboard and keep it current from this cell until the run ends, its pictures included.
    Its caller holds `stopped_if_interrupted` around it, from as early as it has the run. `summary_below`: the
    caller prints the run's summary after it (--wait), which the dashboard's final account then leaves out."""
    from .dashboard import dashboard_for, summary_printed_below

    dashboard = dashboard_for(run, follow=False)  # its widgets' first updates go out as it is made
    if not show_run(run):  # it could not be shown: show_run said why, and how to wait for and stop the run
        return
    summary_printed_below(run, summary_below)
    print(f"kwnb: the dashboard follows {run.name!r} from this cell until it ends; {STOP_HINT}")
    dashboard.follow()
