"""The dashboard as a person sees it: JupyterLab in headless Chromium, a real 2-worker run.

One scenario (module fixture `ui`), several checks on what it recorded, once with each kernel: the
main venv's (ipykernel 7, IPython 9, ipywidgets 8) and ipykernel 6.17's (Colab's runtime, Python 3.13
and IPython 7.34, with ipywidgets 8 in place of its 7.7.1: JupyterLab 4's widget manager draws
ipywidgets 8's widgets only), from a kernel spec in the server's own data folder. The second skips,
saying why, where `make colab-env` or `make colab-widgets8-env` has not built its venv. JupyterLab runs on
127.0.0.1 with a token and its own settings (no news, no update check); Playwright drives
Debian's /usr/bin/chromium. While the workers train, the fixture reads the dashboard from the
DOM about three times a second, so the checks see it live, not only its final state. The
scenario is tests/ui_support/dashboard_page.py, shared with the Notebook 7 test.

Screenshots go to build/ui-screenshots/; with KWNB_UPDATE_DOCS_IMAGES=1 the ones README.md
and docs/ use are copied to docs/images/ too.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

from colab_support import colab_widgets8_python, kernel_spec
from ui_support.dashboard_page import (REPO, Frontend, check_dashboard_shown_once, check_late_worker_shown_waiting,
                                       check_overview_rows,
                                       check_runtime_lines_folded, check_timeline_drawn, during_run, record_session,
                                       toggle_text)
from ui_support.lab import CHROMIUM, DARK, jupyterlab

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no {CHROMIUM}: the browser test needs Debian's chromium (apt-get install chromium)"),
]


def wait_idle(page, timeout: float = 90) -> None:
    """The status bar's kernel item, e.g. 'Python 3 (ipykernel) | Idle'."""
    page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"Python 3.*\| Idle")).wait_for(timeout=timeout * 1000)


def fold_file_browser(page) -> None:
    page.keyboard.press("Control+b")  # more room for the notebook


JUPYTERLAB = Frontend(server=jupyterlab, path="lab/tree/ui.ipynb", wait_idle=wait_idle, prefix="", page_name="lab",
                      docs=True, after_open=fold_file_browser)


def with_ipykernel6() -> Frontend:
    """JupyterLab of the main venv, the notebook's kernel ipykernel 6.17 of Colab's runtime with ipywidgets 8."""
    spec = kernel_spec(colab_widgets8_python(), "Python 3.13 (ipykernel 6.17)", PYTHONPATH=str(REPO))  # this kwnb
    return dataclasses.replace(JUPYTERLAB, server=functools.partial(jupyterlab, kernels={"ipykernel6": spec}),
                               kernel="ipykernel6", prefix="lab-ipykernel6-", page_name="lab-ipykernel6", docs=False)


# The versions each kernel says it imported (prefixes): ipykernel, ipywidgets, IPython.
KERNELS = {"ipykernel7": ("7.", "8.", ""), "ipykernel6.17": ("6.17.", "8.", "7.34.")}


@pytest.fixture(scope="module", params=list(KERNELS))
def ui(request, tmp_path_factory):
    frontend = JUPYTERLAB if request.param == "ipykernel7" else with_ipykernel6()
    return {**record_session(frontend, tmp_path_factory.mktemp("lab")), "kernel": request.param}


def test_the_kernel_is_the_one_asked_for_and_imports_this_checkouts_kwnb(ui):
    where, *versions = ui["kernel_says"].split()
    assert where == str(REPO / "kwnb" / "__init__.py"), ui["kernel_says"]
    assert all(v.startswith(p) for v, p in zip(versions, KERNELS[ui["kernel"]], strict=True)), ui["kernel_says"]


def test_a_tab_per_worker(ui):
    labels = ui["final"]["labels"]
    assert [l.split(":")[0] for l in labels] == ["worker 0 (chief)", "worker 1"]
    assert len(ui["final"]["logs"]) == len(ui["final"]["bars"]) == 2


def test_log_lines_arrive_while_the_run_goes_on(ui):
    live = [s for s in during_run(ui) if toggle_text(s).endswith("hidden - show")]  # not while unfolded
    chief_logs = [s["logs"][0] for s in live]
    assert len(set(chief_logs)) >= 3, "the chief's log changed fewer than 3 times while running"
    counts = [len(log.splitlines()) for log in chief_logs]
    assert counts == sorted(counts) and counts[-1] > counts[0], counts
    assert any("Epoch 2/4" in log and "Epoch 4/4" not in log for log in chief_logs), "no mid-run log seen"
    assert all("Epoch 4/4" in log and "DONE" in log for log in ui["final"]["logs"])


def test_progress_advances(ui):
    chief = [s["bars"][0] for s in ui["snapshots"] if s["bars"]]
    assert chief == sorted(chief), chief
    assert len({p for p in chief if 0 < p < 100}) >= 3, f"fewer than 3 intermediate progress values: {chief}"
    assert ui["final"]["bars"] == [100, 100]


def test_both_workers_finish_with_exit_code_0(ui):
    final = ui["final"]
    assert final["labels"] == ["worker 0 (chief): finished", "worker 1: finished"]
    assert len(final["headers"]) == 2 and all("FINISHED" in h and "exit code 0" in h for h in final["headers"])
    assert final["title"].startswith("FINISHED") and final["stop_disabled"]


def test_curves_image_is_rendered_and_redrawn_during_training(ui):
    live_sources = {s["img"]["src"] for s in during_run(ui) if s["img"] and s["img"]["rendered"]}
    assert len(live_sources) >= 2, "the curves image did not change while the run went on"
    assert ui["final"]["img"]["rendered"] and ui["final"]["img"]["width"] > 300


def test_the_kernel_answers_while_the_workers_run(ui):
    answers = {a for s in ui["snapshots"] for a in s["answers"] if a}
    asked_while_running = [a for s in during_run(ui) for a in s["answers"] if ": run running," in a]
    assert asked_while_running, f"no answer from the kernel while the workers ran: {answers}"
    assert len(answers) >= 2  # the first answer (right after launch) and the one asked mid-training


def test_status_is_words_as_well_as_colour_in_both_themes(ui):
    assert ui["theme"] == DARK
    for state in (ui["final"], ui["dark"]):
        assert all(l.endswith(": finished") for l in state["labels"])
        assert state["title"].startswith("FINISHED") and all("FINISHED" in h for h in state["headers"])
    new_parts = {"overview_head", "overview_cell", "overview_badge", "fold"}
    assert "banner" in ui["contrast_waiting"], "the diagnoses banner was not measured"
    for theme in ("contrast_waiting", "contrast_running", "contrast_narrow", "contrast_light", "contrast_dark"):
        assert new_parts <= ui[theme].keys(), f"{theme}: the overview or the toggle not found: {ui[theme]}"
        low = {k: round(v, 2) for k, v in ui[theme].items() if v < 4.5}
        assert not low, f"{theme}: text below WCAG AA contrast 4.5:1: {low}"


def test_narrow_width_stays_inside_the_page(ui):
    assert ui["screenshots"]["narrow"].exists()
    assert ui["narrow_overflow"] <= 2, \
        f"the dashboard is {ui['narrow_overflow']} px wider than its cell at 700 px: {ui['narrow_too_wide']}"
    overflow = ui["narrow_overview_overflow"]
    assert overflow <= 2, f"the overview reaches {overflow} px past the dashboard at 700 px"
    assert all(ui["narrow_snapshot"]["overview"]["rows_shown"])


# The whole cluster at a glance (issue 14): worker 1 starts 14 s late, so the chief waits for it.

def test_overview_shows_every_task_at_once_with_rate_and_memory(ui):
    check_overview_rows(ui)


def test_a_late_worker_is_shown_waiting_in_words(ui):
    check_late_worker_shown_waiting(ui)


def test_runtime_lines_are_folded_until_the_toggle_is_clicked(ui):
    check_runtime_lines_folded(ui)


def test_timeline_is_drawn_under_the_curves(ui):
    check_timeline_drawn(ui)


def test_the_live_view_shows_the_dashboard_once(ui):
    check_dashboard_shown_once(ui)


# What a person sees but the DOM alone does not say (each was a real problem of the dashboard once).

def test_tab_labels_are_not_clipped(ui):
    assert not ui["final"]["clipped_labels"] and not ui["dark"]["clipped_labels"]


def test_log_tail_shows_the_newest_lines(ui):
    live = [s for s in during_run(ui) if s["bars"] and s["bars"][0] > 0]
    assert live and all(s["log_at_bottom"] for s in live)


def test_curves_are_not_upscaled(ui):
    assert ui["final"]["img_box"]["width"] <= ui["final"]["img"]["width"] * 1.05


def test_no_broken_image_before_the_first_curves(ui):
    for first in ui["snapshots"][:3]:
        assert not (first["img_box"] and first["img_box"]["shown"] and not first["img"]["rendered"])
        timeline = first["timeline"]
        assert not (timeline and timeline["shown"] and not timeline["rendered"])
