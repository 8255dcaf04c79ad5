"""The dashboard as a person sees it in the classic interface: Jupyter Notebook 7, a real 2-worker run.

The same scenario as the JupyterLab test (tests/ui_support/dashboard_page.py: run the notebook,
watch the training about three times a second, reopen the page in the dark theme) on Notebook 7's
page, /notebooks/ui.ipynb. That page has no status bar; its idle signal is the toolbar's kernel
indicator. Screenshots go to build/ui-screenshots/notebook7-*.png.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ui_support.dashboard_page import (Frontend, check_late_worker_shown_waiting, check_overview_rows,
                                       check_runtime_lines_folded, check_timeline_drawn, during_run, record_session)
from ui_support.lab import CHROMIUM, DARK, notebook7

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no {CHROMIUM}: the browser test needs Debian's chromium (apt-get install chromium)"),
]

# The toolbar's kernel indicator says "idle" already while the page shows "No Kernel" (measured: for
# about 0.4 s before the kernel connects), so idle counts only once the kernel's name is shown too.
IDLE_JS = """() => {
  const indicator = document.querySelector('.jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator');
  const kernel = document.querySelector('.jp-NotebookPanel-toolbar .jp-KernelName');
  return !!(indicator && kernel && indicator.dataset.status === 'idle' && kernel.textContent.startsWith('Python 3'));
}"""


def wait_idle(page, timeout: float = 90) -> None:
    page.wait_for_function(IDLE_JS, timeout=timeout * 1000)


NOTEBOOK7 = Frontend(server=notebook7, path="notebooks/ui.ipynb", wait_idle=wait_idle, prefix="notebook7-",
                     page_name="notebook7")


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    return record_session(NOTEBOOK7, tmp_path_factory.mktemp("notebook7"))


def test_a_tab_per_worker_and_every_label_readable_whole(ui):
    for state in (ui["final"], ui["dark"]):
        assert [l.split(":")[0] for l in state["labels"]] == ["worker 0 (chief)", "worker 1"]
        assert not state["clipped_labels"], f"tab labels cut short: {state['clipped_labels']}"
    assert len(ui["final"]["logs"]) == len(ui["final"]["bars"]) == 2


def test_live_while_training(ui):
    live = during_run(ui)
    assert live, "the tabs never said 'running' for both workers"
    chief = [s["bars"][0] for s in live if s["bars"]]
    assert len({p for p in chief if 0 < p < 100}) >= 3, f"the chief's bar moved fewer than 3 times: {chief}"
    assert chief == sorted(chief), chief
    chief_logs = [s["logs"][0] for s in live]
    assert len(set(chief_logs)) >= 3, "the chief's log changed fewer than 3 times while running"
    assert any("Epoch 2/4" in log and "Epoch 4/4" not in log for log in chief_logs), "no mid-run log seen"
    assert all(s["log_at_bottom"] for s in live if s["bars"] and s["bars"][0] > 0), "the log tail scrolled away"


def test_curves_image_is_rendered_and_redrawn(ui):
    live_sources = {s["img"]["src"] for s in during_run(ui) if s["img"] and s["img"]["rendered"]}
    assert len(live_sources) >= 2, "the curves image did not change while the run went on"
    for state in (ui["final"], ui["dark"]):
        assert state["img"]["rendered"] and state["img"]["width"] > 300
        assert state["img_box"]["shown"] and state["img_box"]["width"] <= state["img"]["width"] * 1.05


def test_at_the_end_tabs_finished_and_stop_disabled(ui):
    final = ui["final"]
    assert final["labels"] == ["worker 0 (chief): finished", "worker 1: finished"]
    assert len(final["headers"]) == 2 and all("FINISHED" in h and "exit code 0" in h for h in final["headers"])
    assert final["title"].startswith("FINISHED") and final["stop_disabled"]
    assert final["bars"] == [100, 100]
    assert all("Epoch 4/4" in log and "DONE" in log for log in final["logs"])


def test_the_kernel_answers_while_the_workers_run(ui):
    assert any(": run running," in a for s in during_run(ui) for a in s["answers"]), "no answer while running"


def test_readable_contrast_in_both_themes(ui):
    assert ui["theme"] == DARK and ui["dark"]["labels"] == ui["final"]["labels"]
    assert "banner" in ui["contrast_waiting"], "the diagnoses banner was not measured"
    for theme in ("contrast_waiting", "contrast_running", "contrast_narrow", "contrast_light", "contrast_dark"):
        expected = {"title", "tab", "log", "overview_head", "overview_cell", "overview_badge", "fold"}
        assert expected <= ui[theme].keys(), f"{theme}: texts not found: {ui[theme]}"
        low = {k: round(v, 2) for k, v in ui[theme].items() if v < 4.5}
        assert not low, f"{theme}: text below WCAG AA contrast 4.5:1: {low}"


def test_narrow_width_stays_inside_the_page(ui):
    assert ui["narrow_overflow"] <= 2, \
        f"the dashboard is {ui['narrow_overflow']} px wider than its cell at 700 px: {ui['narrow_too_wide']}"
    overflow = ui["narrow_overview_overflow"]
    assert overflow <= 2, f"the overview reaches {overflow} px past the dashboard at 700 px"
    assert all(ui["narrow_snapshot"]["overview"]["rows_shown"])


def test_overview_late_worker_quiet_logs_and_timeline(ui):
    """The whole cluster at a glance (issue 14), as in the JupyterLab test."""
    check_overview_rows(ui)
    check_late_worker_shown_waiting(ui)
    check_runtime_lines_folded(ui)
    check_timeline_drawn(ui)
