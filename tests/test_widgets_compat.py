"""The dashboard on ipywidgets 8 (the main venv) and 7 (the Colab environment: 7.7.1, IPython 7.34), bridged
in kwnb/notebook/widgets_compat.py; and a dashboard that cannot be built starts nothing, or, shown for a run
already going, shows its text account with how to wait for and stop it, never a traceback."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from colab_support import ROOT, colab_python, run_in

SCRIPTS = Path(__file__).parent / "scripts"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def last_json(result) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def main_python() -> Path:
    return Path(sys.executable)


@pytest.mark.slow
@pytest.mark.parametrize("python, major", [(main_python, "8"), (colab_python, "7")], ids=["ipywidgets8", "ipywidgets7"])
def test_the_dashboard_is_built_titled_and_displayed(python, major, tmp_path):
    shown = last_json(run_in(python(), str(SCRIPTS / "dashboard_shown.py"), str(tmp_path), cwd=tmp_path,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}))
    assert shown["ipywidgets"].split(".")[0] == major
    assert shown["codes"] == [0, 0]
    titles = ["worker 0 (chief): finished", "worker 1: finished"]
    assert shown["titles"] == titles
    # What the front end receives: 8's `titles` list, 7's `_titles` dict keyed by position.
    assert shown["titles_synced"] == (titles if major == "8" else {"0": titles[0], "1": titles[1]})
    assert shown["printed"] == ""  # no traceback, no fallback line
    view, account = shown["outputs"][:2]
    assert view[WIDGET_VIEW] == {"version_major": 2, "version_minor": 0, "model_id": shown["model_id"]}
    assert view["text/html"] == "" and "kwnb-static" in account["text/html"]


@pytest.mark.slow
@pytest.mark.parametrize("python", [main_python, colab_python], ids=["ipywidgets8", "ipywidgets7"])
def test_a_dashboard_that_cannot_be_built_leaves_no_task_running(python, tmp_path):
    report = last_json(run_in(python(), str(SCRIPTS / "dashboard_broken.py"), str(tmp_path), cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "KWNB_WARM": "0"}))
    # %%kw_worker: one line saying why, and nothing started.
    assert report["error"].startswith("UsageError: the dashboard cannot be drawn here (ipywidgets ")
    assert report["error"].endswith(" has no way to title a Tab's pages (Tab.titles, Tab.set_title)); nothing started")
    assert report["runs"] == 0 and report["tasks"] == []
    # A run going already, displayed: why in one line, what to do, its text account; it stops as asked.
    line = report["shown_stdout"]
    assert line.count("\n") == 1 and "cannot be shown here" in line and "%kw_stop shown stops it" in line
    assert report["account"] and report["tasks_while_shown"] == 2
    assert report["kw_show_error"] == "None" and report["kw_show_stdout"] == line and report["kw_show_account"]
    assert report["status"] == "stopped" and report["tasks_after_stop"] == []
