"""The magics in a real Jupyter kernel (nbclient), with a real 2-worker TensorFlow run.

nbclient saves widget state once, at the end, so this checks the dashboard's final state;
live updates in a browser are the JupyterLab UI test's job.
"""
import base64
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

SCRIPT = (Path(__file__).parent / "scripts" / "keras_fit.py").read_text()
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernel")
    cells = [
        "%load_ext kwnb",
        "%%kw_worker main.py -n 2 --args 1\n" + SCRIPT,
        "import kwnb\nprint('run is', 'done' if kwnb.get_run('main').done else 'still going')",
        "%kw_wait main",
        "print(kwnb.get_run('main').exit_codes, [r['epoch'] for r in kwnb.get_run('main').history()])",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def text_of(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def test_cell_returns_a_dashboard_and_the_kernel_stays_free(executed):
    (display,) = executed.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in display["data"]
    assert "kwnb Run 'main'" in display["data"]["text/plain"]
    assert text_of(executed.cells[2]).strip() == "run is still going"


def test_wait_prints_the_summary_and_results_hold(executed):
    summary = text_of(executed.cells[3])
    assert "kwnb run 'main': finished" in summary and "exit codes: 0, 0" in summary
    assert "3 epochs, last: loss" in summary
    assert text_of(executed.cells[4]).strip() == "[0, 0] [0, 1, 2]"


def test_saved_widgets_show_the_finished_run(executed):
    models = executed.metadata["widgets"][WIDGET_STATE]["state"].values()
    by_name = {}
    for model in models:
        by_name.setdefault(model["model_name"], []).append(model)
    (tab,) = by_name["TabModel"]
    assert tab["state"]["titles"] == ["worker 0 (chief): finished", "worker 1: finished"]
    bars = [m["state"] for m in by_name["FloatProgressModel"]]
    assert [(b["value"], b["bar_style"]) for b in bars] == [(1.0, "success"), (1.0, "success")]
    logs = [m["state"]["value"] for m in by_name["HTMLModel"] if "<pre" in m["state"]["value"]]
    assert len(logs) == 2 and all("Epoch 3/3" in log and "DONE" in log for log in logs)
    # Rendered as a terminal would: the final progress line, not thousands of \b fragments.
    assert all("\b" not in log and "20/20 [==============================]" in log for log in logs)
    curves, timeline = by_name["ImageModel"]  # in the order the dashboard makes them
    for image in (curves, timeline):
        png = base64.b64decode(image["buffers"][0]["data"])
        assert png.startswith(b"\x89PNG") and len(png) > 10_000
    (overview,) = [m["state"]["value"] for m in by_name["HTMLModel"] if "kwnb-overview" in m["state"]["value"]
                   and "<table" in m["state"]["value"]]
    assert overview.count("<tr>") == 3 and overview.count("FINISHED") == 2 and "peak" in overview
