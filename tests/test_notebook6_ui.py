"""The dashboard in classic Notebook 6.5 with ipywidgets 7, as a learner on Colab's runtime has them, in
headless Chromium: two real 2-worker runs.

Colab's runtime (.venv-colab: notebook 6.5.7, ipywidgets 7.7.1, widgetsnbextension 3.6.10, ipykernel
6.17.1, IPython 7.34, Python 3.13) serves the page on 127.0.0.1 with a token and its own folders
(ui_support/notebook6.py); its kernels import this checkout's kwnb. One scenario (module fixture `ui`,
ui_support/classic_page.py): a quick run watched about three times a second to its end, then a long run, the
page reloaded while it trains, and the run stopped with the reloaded page's Stop button. Screenshots go to
build/ui-screenshots/notebook6-*.png.
Skipped, saying why, where chromium, python3.13 or the Colab environment (`make colab-env`) is missing.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

from colab_support import colab_python
from ui_support.classic_page import record_classic_session
from ui_support.dashboard_checks import COLUMNS, during_run
from ui_support.dashboard_page import Frontend
from ui_support.lab import CHROMIUM
from ui_support.notebook6 import REPO, notebook6

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no {CHROMIUM}: the browser test needs Debian's chromium (apt-get install chromium)"),
]

# Classic Notebook's kernel indicator, the circle right of the kernel's name: kernel_idle_icon once the
# kernel is connected and idle (measured: no class, then kernel_busy_icon while it starts). And the widgets
# extension loaded: its renderer of the widget view registered and its manager listening for the kernel's
# widgets, so that the cells run as on a page a learner has had open for a moment (a widget displayed
# before then is drawn only once the manager has fetched the kernel's widgets).
IDLE_JS = """() => {
  const kernel = window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel;
  const order = require.defined('notebook/js/outputarea') && require('notebook/js/outputarea').OutputArea.display_order;
  return !!(document.querySelector('#kernel_indicator_icon.kernel_idle_icon') && kernel && kernel.widget_manager
            && kernel.comm_manager.targets['jupyter.widget'] && order
            && order.includes('application/vnd.jupyter.widget-view+json'));
}"""


def wait_idle(page, timeout: float = 90) -> None:
    page.wait_for_function(IDLE_JS, timeout=timeout * 1000)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    python = colab_python()
    frontend = Frontend(server=functools.partial(notebook6, python), path="notebooks/ui.ipynb", wait_idle=wait_idle,
                        prefix="notebook6-", page_name="notebook6")
    return record_classic_session(frontend, tmp_path_factory.mktemp("notebook6"))


def test_the_page_is_classic_notebook_6_5_and_the_kernel_imports_this_checkouts_kwnb(ui):
    assert ui["server_version"].startswith("6.5."), ui["server_version"]  # its page is nbclassic's (1.x)
    where, version = ui["kernel_says"].split()
    assert where == str(REPO / "kwnb" / "__init__.py") and version.startswith("7."), ui["kernel_says"]


def test_a_tab_per_worker_with_labels_readable_whole(ui):
    for state in (ui["final"], ui["stopped"]):
        assert [l.split(":")[0] for l in state["labels"]] == ["worker 0 (chief)", "worker 1"]
        assert not state["clipped_labels"], f"tab labels cut short: {state['clipped_labels']}"
        assert len(state["logs"]) == len(state["bars"]) == 2
    # the Stop button while the run goes (ipywidgets 7's red is too light for its white word: kwnb darkens it)
    assert "stop" in ui["contrast_running"], ui["contrast_running"]
    for measured in ("contrast_running", "contrast_final"):
        assert {"title", "tab", "other_tab", "log", "overview_cell"} <= ui[measured].keys(), ui[measured]
        low = {k: round(v, 2) for k, v in ui[measured].items() if v < 4.5}
        assert not low, f"{measured}: text below WCAG AA contrast 4.5:1: {low}"


def test_the_log_and_the_progress_change_while_the_run_trains(ui):
    live = during_run(ui)
    assert live, "the tabs never said 'running' for both workers"
    chief_logs = [s["logs"][0] for s in live]
    assert len(set(chief_logs)) >= 3, "the chief's log changed fewer than 3 times while running"
    counts = [len(log.splitlines()) for log in chief_logs]
    assert counts == sorted(counts) and counts[-1] > counts[0], counts
    assert any("Epoch 1/2" in log and "Epoch 2/2" not in log for log in chief_logs), "no mid-run log seen"
    chief = [s["bars"][0] for s in live]
    assert len({p for p in chief if 0 < p < 100}) >= 3, f"the chief's bar moved fewer than 3 times: {chief}"
    assert chief == sorted(chief), chief
    rows = [s["overview"]["rows"] for s in live if s["overview"]]
    assert rows and all(len(r) == 2 and len(r[0]) == len(COLUMNS) for r in rows)
    assert len({r[0][COLUMNS.index("progress")] for r in rows}) >= 3, "the overview's progress did not move"


def test_the_curves_and_timeline_are_drawn_while_training(ui):
    """The curves are drawn once the chief reports steps, then at most every 1.5 s, longer while a draw costs
    more than 5 % of a core (notebook/curves_view.py): a few seconds of training may see them drawn once. The
    timeline is drawn from the tasks' start and at each change of phase."""
    curves = {s["img"]["src"] for s in during_run(ui) if s["img"] and s["img"]["rendered"]}
    timeline = {s["timeline"]["src"] for s in during_run(ui) if s["timeline"] and s["timeline"]["rendered"]}
    assert curves, "no curves drawn while the run went on"
    assert len(timeline) >= 2, "the timeline did not change while the run went on"
    for picture in ("img", "timeline"):
        assert ui["final"][picture]["rendered"] and ui["final"][picture]["width"] > 300


def test_the_run_ends_finished_with_exit_codes_0_0(ui):
    final = ui["final"]
    assert final["labels"] == ["worker 0 (chief): finished", "worker 1: finished"]
    assert len(final["headers"]) == 2 and all("FINISHED" in h and "exit code 0" in h for h in final["headers"])
    assert final["title"].startswith("FINISHED") and final["stop_disabled"]
    assert final["bars"] == [100, 100]
    assert all("Epoch 2/2" in log and "DONE" in log for log in final["logs"])


def test_the_widgets_show_and_their_static_account_does_not(ui):
    """The run's cell shows the dashboard once; the static account for pages without widgets, its second
    output, is hidden whole by the dashboard's style (its .output_area rule is classic Notebook's)."""
    seen = {(o["dashboards"], o["dashboards_in_page"], o["static_in_page"], o["account_boxes"])
            for o in [s["first_output"] for s in ui["snapshots"] if s] + [ui["final"]["first_output"]]}
    assert seen == {(1, 1, 0, 0)}, f"(dashboards in the run's cell, in the page, static accounts, their boxes): {seen}"


def test_a_page_reloaded_mid_run_draws_both_dashboards_again_and_the_running_one_moves_on(ui):
    """A learner reloads the page while a run trains (saved first, as Notebook's autosave does every 2 minutes):
    the saved outputs' dashboards are drawn again from the widgets the kernel still holds, the running one goes on
    updating, and its Stop button then works (the next test)."""
    before, after = ui["before_reload"], ui["reloaded"]
    assert ui["dashboards_after_reload"] == 2, ui["dashboards_after_reload"]
    assert after is not None and after["title"].startswith("RUNNING") and "endless" in after["title"], after
    assert after["labels"] == before["labels"], (before["labels"], after)
    assert after["bars"][0] >= before["bars"][0] and ui["before_stop"]["bars"][0] > after["bars"][0], \
        (before["bars"], after["bars"], ui["before_stop"]["bars"])


def test_the_stop_button_stops_a_run_that_trains(ui):
    before, stopped = ui["before_stop"], ui["stopped"]
    assert before["title"].startswith("RUNNING") and 0 < before["bars"][0] < 100, before["title"]
    assert stopped["title"].startswith("STOPPED") and stopped["stop_disabled"], stopped["title"]
    assert "stopped by the user" in stopped["title"], stopped["title"]
    # Stopped, in words, and nothing said wrong: TensorFlow holds off TERM (its preemption notifier), so kwnb
    # KILLs both tasks after their grace; the peer each then loses is no fault of the run.
    assert stopped["labels"] == ["worker 0 (chief): stopped", "worker 1: stopped"], stopped["labels"]
    assert not stopped["banner"], stopped["banner"]
    assert len(stopped["headers"]) == 2 and all(h.startswith("STOPPED") for h in stopped["headers"]), stopped["headers"]
    assert stopped["bars"][0] < 100 and "Epoch 50/50" not in stopped["logs"][0]
    pids = [int(re.search(r"pid (\d+)", h).group(1)) for h in stopped["headers"]]
    assert len(pids) == 2 and not [pid for pid in pids if alive(pid)], f"a stopped task's process is alive: {pids}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
