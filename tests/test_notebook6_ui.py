"""The dashboard in classic Notebook 6.5.7 with ipywidgets 7.7.1, as Colab's runtime holds them (the Colab
environment, `make colab-env`), in headless Chromium: it renders a tab per task, updates while the tasks
run (from kwnb's background thread, which this front end repaints), and its Stop button stops a run.

No TensorFlow: the tasks print Keras-like lines, so the test is about the page, and quick."""
from __future__ import annotations

import os
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from colab_support import colab_python
from ui_support.lab import CHROMIUM, CHROMIUM_ARGS, free_port, stop, tail

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no {CHROMIUM}: the browser test needs Debian's chromium (apt-get install chromium)"),
]

FIT = """import time
for epoch in range(4):
    print(f"Epoch {epoch + 1}/4", flush=True)
    for step in range(1, 6):
        print(f"{step}/5 [====] - loss: {1.0 / (epoch * 5 + step):.4f}", end="\\r" if step < 5 else "\\n", flush=True)
        time.sleep(0.6)
print("DONE", flush=True)
"""
CELLS = ["%load_ext kwnb", f"%%kw_worker fit6.py -n 2 --name live6\n{FIT}",
         "%%kw_worker forever6.py -n 2 --name stop6\nimport time\nprint('waiting', flush=True)\ntime.sleep(600)\n"]
# Each dashboard's title (its first HTML widget), tab labels (lumino's, as ipywidgets 7.6+ draws them) and shown log.
STATE_JS = """() => [...document.querySelectorAll('.kwnb-dashboard')].map(board => ({
  title: (board.querySelector('.widget-html') || {}).textContent || '',
  labels: [...board.querySelectorAll('.lm-TabBar-tabLabel')].map(label => label.textContent),
  logs: [...board.querySelectorAll('.widget-html')].map(html => html.textContent).filter(t => t.includes('Epoch')),
}))"""


def classic_notebook(root: Path, home: Path):
    """Notebook 6.5.7 of the Colab environment serving `root`, its kernel that environment's ipykernel."""
    port, token = free_port(), secrets.token_hex(16)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_CURRENT_TEST")}
    env.update(JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_DATA_DIR=str(home / "data"), KWNB_WARM="0", PYTHONUNBUFFERED="1")
    command = [str(colab_python()), "-m", "notebook", "--NotebookApp.ip=127.0.0.1", f"--NotebookApp.port={port}",
               "--NotebookApp.port_retries=0", f"--NotebookApp.token={token}", "--NotebookApp.open_browser=False",
               f"--NotebookApp.notebook_dir={root}", "--allow-root"]
    log_path = home / "notebook.log"
    home.mkdir(parents=True)
    process = subprocess.Popen(command, cwd=root, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, tail(log_path)
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                break
        except OSError:
            assert time.monotonic() < deadline, tail(log_path)
            time.sleep(0.25)
    return process, f"{base}/notebooks/ui6.ipynb?token={token}", log_path


def tasks_running(script: str) -> list[int]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(part.endswith(script) for part in process.info["cmdline"] or []):
            found.append(process.pid)
    return found


@pytest.fixture(scope="module")
def page_record(tmp_path_factory):
    colab_python()
    from playwright.sync_api import sync_playwright

    base = tmp_path_factory.mktemp("notebook6")
    root = base / "notebooks"
    root.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "ui6.ipynb")
    process, url, log_path = classic_notebook(root, base / "home")
    record = {"samples": []}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(url)
            page.wait_for_function("() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                                   " && Jupyter.notebook.kernel.is_connected()", timeout=90_000)
            page.evaluate("() => Jupyter.notebook.execute_cells([0, 1])")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = page.evaluate(STATE_JS)
                record["samples"].append(state)
                # The title and the tabs' labels are separate messages: the end is both.
                if state and state[0]["title"].startswith("FINISHED") and state[0]["labels"] and \
                        all(label.endswith("finished") for label in state[0]["labels"]):
                    break
                time.sleep(0.3)
            page.evaluate("() => Jupyter.notebook.execute_cells([2])")
            page.wait_for_function("() => document.querySelectorAll('.kwnb-dashboard').length == 2", timeout=60_000)
            deadline = time.monotonic() + 60
            while not tasks_running("forever6.py") and time.monotonic() < deadline:
                time.sleep(0.2)
            record["before_stop"] = tasks_running("forever6.py")
            page.locator(".kwnb-dashboard").nth(1).locator("button", has_text="Stop").click()
            page.wait_for_function("() => (document.querySelectorAll('.kwnb-dashboard')[1]"
                                   ".querySelector('.widget-html') || {}).textContent.startsWith('STOPPED')",
                                   timeout=60_000)
            record["stopped"] = page.evaluate(STATE_JS)[1]
            record["after_stop"] = tasks_running("forever6.py")
            browser.close()
    except Exception as error:  # what the page and the server said, for a failure under load
        last = record["samples"][-1] if record["samples"] else None
        raise AssertionError(f"{error}\nlast sample: {last}\nserver log:\n{tail(log_path)}") from error
    finally:
        stop(process)
    record["log"] = tail(log_path)
    return record


def test_the_dashboard_renders_a_tab_per_task_and_ends_finished(page_record):
    final = page_record["samples"][-1][0]
    assert final["title"].startswith("FINISHED"), page_record["log"]
    assert final["labels"] == ["worker 0 (chief): finished", "worker 1: finished"]
    assert any("DONE" in log for log in final["logs"])


def test_the_dashboard_updates_while_the_tasks_run(page_record):
    running = [sample[0] for sample in page_record["samples"] if sample and sample[0]["title"].startswith("RUNNING")]
    logs = {log for sample in running for log in sample["logs"][:1]}
    assert len(logs) >= 3, f"the chief's log changed fewer than 3 times while running: {logs}"


def test_stop_stops_the_run(page_record):
    assert len(page_record["before_stop"]) == 2
    assert page_record["stopped"]["title"].startswith("STOPPED")
    assert page_record["after_stop"] == []
