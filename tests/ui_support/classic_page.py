"""The dashboard in classic Notebook 6 with ipywidgets 7, recorded: one run watched to its end, then a
second run stopped with its dashboard's Stop button while it trains.

The page is read with the shared probes (ui_support/page_probes.py): kwnb's own classes and the widgets'
(widget-html-content, widget-hprogress, and the tabs' lm-TabBar-tab, which ipywidgets 7.6+ draws with
lumino as 8 does) are the same there; only the notebook's own classes differ (.cell, .output and
.output_area for JupyterLab's .jp-Cell, .jp-OutputArea and .jp-OutputArea-child), and the probes read the
page's newest dashboard, the stopped run's once it is shown. Classic Notebook has neither JupyterLab's
themes nor its settings files: the page stays in its only (light) theme.
"""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import nbformat

from .dashboard_checks import running
from .dashboard_page import SHOTS, Frontend, page_on, shot
from .lab import PACED, tail
from .page_probes import CONTRAST_JS, SNAPSHOT_JS

# JupyterLab's notebook classes in the shared probes, and classic Notebook's for them (the longest first).
CLASSIC_CLASSES = {".jp-OutputArea-child": ".output_area", ".jp-OutputArea": ".output", ".jp-Cell": ".cell"}
NEWEST = "[...document.querySelectorAll('.output .kwnb-dashboard')].pop()"
DASHBOARD = ".output .kwnb-dashboard"


def classic(probe: str) -> str:
    """A shared probe, reading classic Notebook's page and its newest dashboard."""
    for lab, notebook in CLASSIC_CLASSES.items():
        probe = probe.replace(lab, notebook)
    probe = probe.replace(f"document.querySelector('{DASHBOARD}')", NEWEST)
    assert ".jp-" not in probe and NEWEST in probe, "the shared probes changed: update CLASSIC_CLASSES"
    return probe


SNAPSHOT = classic(SNAPSHOT_JS)
CONTRAST = classic(CONTRAST_JS)

# A quick fit (2 x 80 steps on each of 2 workers, 6-15 s of training with a live Keras progress bar) for the run
# watched to its end, and a long one (50 x 80 steps) for the run stopped while it trains. A sleep after each step
# paces them: the page's checks need the time, not the work (2 x 250 unpaced steps took 4-15 s, and the long run
# kept both cores busy until stopped).
FIT = """\
import time
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(1024, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

""" + PACED + """

model.fit(dataset, epochs={epochs}, steps_per_epoch={steps}, verbose=1, callbacks=[Paced()])
print("DONE")
"""
# The first cell also says which kwnb and ipywidgets the kernel imported: this checkout's, Colab's 7.
CELLS = ["%load_ext kwnb\nimport ipywidgets, kwnb\nprint(kwnb.__file__, ipywidgets.__version__)",
         "%%kw_worker main.py -n 2\n" + FIT.format(epochs=2, steps=80),
         "%%kw_worker endless.py -n 2\n" + FIT.format(epochs=50, steps=80)]


def write_notebook(path: Path) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(notebook, path)


def menu(page, top: str, item: str) -> None:
    """Classic Notebook's menu bar: a Bootstrap dropdown (#celllink) and its entries (#run_cell)."""
    page.locator(f"#{top}").click()
    page.locator(f"#{item} > a").click()


def select_cell(page, index: int) -> None:
    page.locator("#notebook .cell").nth(index).locator(".input_prompt").click()


def record_classic_session(frontend: Frontend, base: Path) -> dict:
    """Open the notebook, run the quick run to its end, then start the long one and stop it from its dashboard."""
    record = {"snapshots": [], "stopping": [], "screenshots": {}, "timings": {}}
    started = time.monotonic()
    try:
        with page_on(frontend, base, write_notebook) as (server, page, _):
            record["console"] = []  # the page's errors and warnings, for a post-mortem
            page.on("console", lambda m: record["console"].append(f"{m.type}: {m.text[:300]}")
                    if m.type in ("error", "warning") else None)
            answers = watch_widget_listing(page)
            page.goto(server.url(frontend.path))
            frontend.wait_idle(page)
            wait_widgets_listed(page, answers)
            record["timings"]["idle"] = time.monotonic() - started
            with urllib.request.urlopen(server.url("api"), timeout=10) as response:
                record["server_version"] = json.load(response)["version"]
            watch_to_the_end(page, frontend, record, started)
            record["kernel_says"] = page.locator("#notebook .cell").first.locator(".output_area").inner_text()
            stop_while_training(page, frontend, record, started, answers)
    finally:
        record["timings"]["total"] = time.monotonic() - started
        record["server_log"] = tail(base / "home" / "notebook6.log")
        (SHOTS / f"{frontend.prefix}record.json").write_text(json.dumps(record, default=str, indent=1))
    return record


def watch_widget_listing(page) -> list[str]:
    """The kernel's answers to "which widgets do you have" as the page receives them: comm_info_reply, or once the
    kernel has imported ipywidgets (a page reloaded mid-run), its control comm's update_states."""
    answers: list[str] = []

    def frames(socket) -> None:  # update_states carries the widgets' buffers (the curves' PNG): a binary frame
        socket.on("framereceived", lambda payload: answers.append(payload) if any(
            mark in payload for mark in (('"comm_info_reply"', '"update_states"') if isinstance(payload, str)
                                         else (b'"comm_info_reply"', b'"update_states"'))) else None)
    page.on("websocket", frames)
    return answers


def wait_widgets_listed(page, answers: list[str], seconds: float = 30) -> None:
    """Until the widgets extension has had the kernel's list of its widgets: at the page's start, its control
    comm refused (ipywidgets 7.7.1's kernel has none), it asks for that list to restore the widgets the kernel
    holds, opening from the page each one it has not met. The cells run after that, as on a page a learner has
    had open for a moment, never beside it: the earlier classic Notebook check, which ran its cells as soon as
    the kernel connected, once saw the widgets stay undrawn in a fresh clone (cause not found)."""
    deadline = time.monotonic() + seconds
    while not answers:
        assert time.monotonic() < deadline, f"the widgets extension never listed the kernel's widgets in {seconds} s"
        page.wait_for_timeout(100)


def sample(page, into: list, started: float) -> dict | None:
    snapshot = page.evaluate(SNAPSHOT)
    if snapshot:
        snapshot["t"] = time.monotonic() - started
    into.append(snapshot)
    return snapshot


def sample_until(page, into: list, started: float, done, seconds: float) -> dict | None:
    deadline = time.monotonic() + seconds
    while not done(snapshot := sample(page, into, started)) and time.monotonic() < deadline:
        page.wait_for_timeout(300)
    return snapshot


def watch_to_the_end(page, frontend: Frontend, record: dict, started: float) -> None:
    """Run the first two cells (load kwnb, the quick run) and read the page about three times a second."""
    select_cell(page, 2)
    menu(page, "celllink", "run_all_cells_above")
    page.locator(DASHBOARD).wait_for(timeout=60_000)
    record["timings"]["shown"] = time.monotonic() - started

    def over(snapshot) -> bool:  # finished, failed or stopped; a screenshot once, mid-run
        if running(snapshot) and snapshot["bars"][0] >= 35 and "running" not in record["screenshots"]:
            record["contrast_running"] = page.evaluate(CONTRAST)
            record["screenshots"]["running"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-running.png")
        return bool(snapshot and snapshot["stop_disabled"])

    sample_until(page, record["snapshots"], started, over, seconds=150)
    record["timings"]["finished"] = time.monotonic() - started
    page.wait_for_timeout(1500)  # the last curves and timeline drawn
    record["final"] = page.evaluate(SNAPSHOT)
    record["contrast_final"] = page.evaluate(CONTRAST)
    record["screenshots"]["final"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-finished.png")


def stop_while_training(page, frontend: Frontend, record: dict, started: float, answers: list) -> None:
    """Run the long run's cell; once both tasks train and the chief's bar moved, reload the page (saved first, as
    autosave does), and once the reloaded page's dashboard moves on, click its Stop button."""
    select_cell(page, 2)
    menu(page, "celllink", "run_cell")
    page.locator(DASHBOARD).nth(1).wait_for(timeout=60_000)
    training = sample_until(page, record["stopping"], started, seconds=120,
                            done=lambda s: running(s) and "endless" in s["title"] and s["bars"][0] > 0)
    record["before_reload"] = training
    reload_while_training(page, frontend, record, started, answers)
    training = sample_until(page, record["stopping"], started, seconds=60, done=lambda s: running(s) and
                            s["bars"][0] > record["reloaded"]["bars"][0])
    record["before_stop"] = training
    page.locator(DASHBOARD).nth(1).locator("button").first.click()
    record["timings"]["stop_clicked"] = time.monotonic() - started
    # Over once the Stop button is disabled, every tab says stopped and every tab's header was redrawn at the
    # end (a hidden tab waits for it: notebook/dashboard.py); 30 s: TERM, a 3 s grace, KILL, on a loaded machine.
    record["stopped"] = sample_until(page, record["stopping"], started, seconds=30, done=lambda s: s["stop_disabled"]
                                     and all(l.endswith(": stopped") for l in s["labels"])
                                     and len(s["headers"]) == len(s["labels"]))
    record["timings"]["stopped"] = time.monotonic() - started
    record["screenshots"]["stopped"] = shot(page.locator(DASHBOARD).nth(1), f"{frontend.prefix}dashboard-stopped.png")


def reload_while_training(page, frontend: Frontend, record: dict, started: float, answers: list) -> None:
    """Save the notebook, reload its page and wait until the widgets extension has listed the kernel's widgets
    again: the saved outputs' dashboards are then drawn from the widgets the kernel still holds."""
    page.evaluate("() => Jupyter.notebook.save_checkpoint()")
    page.wait_for_function("() => !Jupyter.notebook.dirty && Jupyter.notebook.last_modified", timeout=30_000)
    answers.clear()
    page.reload()
    frontend.wait_idle(page)
    wait_widgets_listed(page, answers)
    record["timings"]["reloaded"] = time.monotonic() - started
    page.locator(DASHBOARD).nth(1).wait_for(timeout=30_000)
    record["reloaded"] = sample_until(page, record["stopping"], started, seconds=30, done=running)
    record["dashboards_after_reload"] = page.locator(DASHBOARD).count()
    record["screenshots"]["reloaded"] = shot(page.locator(DASHBOARD).nth(1), f"{frontend.prefix}dashboard-reloaded.png")
