"""One scenario for the browser tests: a real 2-worker run watched in a Jupyter page, recorded.

JupyterLab 4 and Notebook 7 build their pages from the same JupyterLab parts (.jp-Cell,
.jp-OutputArea, the Lumino menu bar), so the same steps and DOM probes serve both; a Frontend
says what differs (server, notebook URL, idle signal, screenshot names). While the workers
train, the page is read about three times a second, so the checks see the dashboard live:
worker 1 starts late, so the overview shows the chief waiting for it, then both training.
What is read is ui_support/page_probes.py's; the checks are ui_support/dashboard_checks.py's.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
import pytest

# The checks and the page probes live in modules of their own; their names stay importable from here.
from .dashboard_checks import (COLUMNS, check_dashboard_shown_once, check_late_worker_shown_waiting,  # noqa: F401
                               check_overview_rows,
                               check_runtime_lines_folded, check_timeline_drawn, during_run, phases, running,
                               toggle_text)
from .lab import CHROMIUM, CHROMIUM_ARGS, DARK, PACED
from .page_probes import CONTRAST_JS, OVERVIEW_OVERFLOW_JS, SNAPSHOT_JS, TOO_WIDE_JS  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "ui-screenshots"
DOCS_IMAGES = REPO / "docs" / "images"
DASHBOARD = ".jp-OutputArea .kwnb-dashboard"

# tf-keras model.fit, verbose=1 (a live progress bar): about 18 s of training on 2 CPU workers, paced by a sleep
# after each step (800 unpaced steps cost 13 CPU-s a scenario, these 200 about 3; the page's checks need the time,
# not the work). Worker 1 comes late: it sleeps 14 s before creating its strategy, so the chief visibly waits for
# it, past the 10 s after which kwnb explains a wait (the banner shows for about 4 s, a dozen of the page's samples).
FIT = """\
import json, os, time
import numpy as np
import tensorflow as tf

if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    time.sleep(14)  # a late worker: the others wait for it
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(1024, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])

""" + PACED + """

model.fit(dataset, epochs=4, steps_per_epoch=50, verbose=1, callbacks=[Paced()])
print("DONE")
"""
CELLS = [  # the first also says which kwnb, ipykernel, ipywidgets and IPython the kernel imported
    "%load_ext kwnb\nimport IPython, ipykernel, ipywidgets, kwnb\n"
    "print(kwnb.__file__, ipykernel.__version__, ipywidgets.__version__, IPython.__version__)",
    "%%kw_worker main.py -n 2\n" + FIT,
    "import time, kwnb\nrun = kwnb.get_run('main')\n"
    "print(f'kernel answered at {time.strftime(\"%H:%M:%S\")}: run {run.status}, {run.elapsed:.1f} s in')",
    "kwnb.get_run('main')  # the same live dashboard, e.g. after reopening the notebook",
]

@dataclass(frozen=True)
class Frontend:
    """What differs between the Jupyter pages the scenario runs in."""
    server: Callable  # (root, home) -> context manager yielding a ui_support.lab.Lab
    path: str  # the notebook's page, under the server's URL
    wait_idle: Callable  # (page) -> None once the kernel is connected and idle
    prefix: str = ""  # of the dashboard screenshots' names in SHOTS
    page_name: str = "lab"  # whole-page screenshots are PAGE_NAME-light.png, PAGE_NAME-dark.png
    docs: bool = False  # README.md's and docs/' images come from this page (copied with KWNB_UPDATE_DOCS_IMAGES=1)
    after_open: Callable | None = None  # (page) -> None, e.g. fold a side panel away
    kernel: str = "python3"  # the notebook's kernel spec, by name


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def select_cell(page, index: int) -> None:
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").click()


def shot(target, name: str, docs: str | None = None) -> Path:
    """A screenshot of a locator. The run's end replaces the dashboard's element (update_display_data), and an
    element replaced while it is being shot fails the shot ("not attached to the DOM"): the locator finds the
    new one on a second try."""
    path = SHOTS / name
    for attempt in range(3):
        try:
            target.screenshot(path=str(path))
            break
        except Exception as error:
            if "not attached" not in str(error) or attempt == 2:
                raise
    if docs and os.environ.get("KWNB_UPDATE_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / docs)
    return path


def write_notebook(path: Path, kernel: str = "python3") -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(notebook, path)


@contextmanager
def page_on(frontend: Frontend, base: Path, write: Callable[[Path], None]):
    """The notebook `write` makes (base/notebooks/ui.ipynb), served by the front end's server, and a Chromium page
    of 1280 x 1100: yields (server, page, the notebook's folder); a failure's screenshot is kept."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # the browser is there, so this is a broken setup, not a reason to skip
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    SHOTS.mkdir(parents=True, exist_ok=True)
    root = base / "notebooks"
    root.mkdir()
    write(root / "ui.ipynb")
    with frontend.server(root, base / "home") as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        try:
            yield server, page, root
        except Exception:
            page.screenshot(path=str(SHOTS / f"{frontend.prefix}failure.png"))
            raise
        finally:
            browser.close()


def record_session(frontend: Frontend, base: Path) -> dict:
    """Open the notebook, run it, watch the run to its end, then reopen the page in the dark theme."""
    record = {"snapshots": [], "screenshots": {}, "timings": {}}
    started = time.monotonic()
    try:
        notebook = functools.partial(write_notebook, kernel=frontend.kernel)
        with page_on(frontend, base, notebook) as (lab, page, root):
            page.goto(lab.url(frontend.path))
            frontend.wait_idle(page)
            if frontend.after_open:
                frontend.after_open(page)
            record["timings"]["idle"] = time.monotonic() - started
            watch_training(page, frontend, record, started)
            record["kernel_says"] = page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-OutputArea").inner_text()
            light_theme_end(page, frontend, record)
            record["saved"] = saved_run_output(page, root / "ui.ipynb")
            dark_theme_reopened(lab, page, frontend, record)
    finally:
        record["timings"]["total"] = time.monotonic() - started
        # for a post-mortem
        (SHOTS / f"{frontend.prefix}record.json").write_text(json.dumps(record, default=str, indent=1))
    return record


def watch_training(page, frontend: Frontend, record: dict, started: float) -> None:
    """Run the first three cells (load, %%kw_worker, a quick question to the kernel) and watch."""
    select_cell(page, 3)
    menu(page, "Run", "Run All Above Selected Cell")
    page.locator(DASHBOARD).wait_for(timeout=60_000)
    done: set[str] = set()
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        snapshot = sample(page, record, started)
        chief_progress = snapshot["bars"][0] if snapshot["bars"] else 0
        if snapshot["banner"] and "waiting" not in done:  # the chief waits for the late worker 1
            record["contrast_waiting"] = page.evaluate(CONTRAST_JS)
            shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-waiting.png")
            done.add("waiting")
        if running(snapshot) and 5 < chief_progress < 90 and "asked" not in done:
            # Ask the kernel again mid-training, as a person would while watching.
            select_cell(page, 2)
            menu(page, "Run", "Run Selected Cell and Do not Advance")
            done.add("asked")
        if running(snapshot) and chief_progress >= 35 and "running" not in done:
            record["contrast_running"] = page.evaluate(CONTRAST_JS)
            record["screenshots"]["running"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-running.png",
                                                    docs="dashboard.png" if frontend.docs else None)
            done.add("running")
        if running(snapshot) and chief_progress >= 55 and "narrow" not in done:
            narrow(page, frontend, record)
            done.add("narrow")
        if running(snapshot) and chief_progress >= 65 and "unfolded" not in done:
            unfold_and_fold_again(page, record, started)
            done.add("unfolded")
        if snapshot["stop_disabled"]:  # the run is over (finished, failed or stopped)
            break
        page.wait_for_timeout(300)
    record["timings"]["finished"] = time.monotonic() - started
    page.wait_for_timeout(2000)  # the last curves and timeline redraw
    if "running" not in done:  # a run too quick to catch mid-way: the checks say so
        shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-running.png")
    if "narrow" not in done:
        narrow(page, frontend, record)


def sample(page, record: dict, started: float) -> dict:
    snapshot = page.evaluate(SNAPSHOT_JS)
    snapshot["t"] = time.monotonic() - started
    record["snapshots"].append(snapshot)
    return snapshot


def sample_until(page, record: dict, started: float, done: Callable, seconds: float = 30.0) -> dict:
    """Sample the page until done(snapshot) holds or `seconds` pass; the last snapshot. 30 s: a click's
    round trip through a kernel on a loaded machine, not a measure of it (it ends as soon as done holds)."""
    deadline = time.monotonic() + seconds
    while not done(snapshot := sample(page, record, started)) and time.monotonic() < deadline:
        page.wait_for_timeout(150)
    return snapshot


def unfold_and_fold_again(page, record: dict, started: float) -> None:
    """Click the visible tab's toggle: TensorFlow's runtime lines show; click it again: folded away,
    so that the screenshots after this show the quiet log a learner sees by default."""
    toggle = page.locator(f"{DASHBOARD} .widget-toggle-button:visible").first
    record["folded"] = sample(page, record, started)
    # The log and the toggle's words are two widgets, so two messages: unfolding, the words change first;
    # folding, the log does (notebook/dashboard.py). Each state is sampled once both have arrived.
    toggle.click()
    record["unfolded"] = sample_until(page, record, started, lambda s: "I0000" in (s["visible_log"] or "")
                                      and _toggle_says(s, "shown - hide"))
    toggle.click()
    record["refolded"] = sample_until(page, record, started, lambda s: "I0000" not in (s["visible_log"] or "I0000")
                                      and _toggle_says(s, "hidden - show"))
    toggle.blur()  # no focus ring in the screenshots that follow


def _toggle_says(snapshot: dict, words: str) -> bool:
    return next((f["text"] for f in snapshot["folds"] if f["shown"]), "").endswith(words)


def narrow(page, frontend: Frontend, record: dict) -> None:
    """A 700 px wide window: the screenshot, and how far the dashboard and its overview overflow the cell."""
    page.set_viewport_size({"width": 700, "height": 1100})
    page.wait_for_timeout(600)
    # In one step in the page: the table is replaced at each refresh (4 a second), so a locator's
    # wait for it to be stable can end on a detached element on a loaded machine.
    page.evaluate(f"() => document.querySelector('{DASHBOARD} table.kwnb-overview').scrollIntoView({{block: 'nearest'}})")
    record["screenshots"]["narrow"] = shot(page, f"{frontend.prefix}dashboard-narrow-700px.png",
                                           docs="dashboard-narrow.png" if frontend.docs else None)
    record["narrow_overflow"] = page.evaluate(
        "() => { const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');"
        " return d.scrollWidth - d.clientWidth; }")
    record["narrow_overview_overflow"] = page.evaluate(OVERVIEW_OVERFLOW_JS)
    record["narrow_too_wide"] = page.evaluate(TOO_WIDE_JS)
    # An image redrawn at that moment (the timeline, every few seconds) is measured once loaded.
    page.wait_for_function(f"() => [...document.querySelectorAll('{DASHBOARD} > img')].every(i => i.complete)",
                           timeout=5000)
    record["narrow_snapshot"] = page.evaluate(SNAPSHOT_JS)
    record["contrast_narrow"] = page.evaluate(CONTRAST_JS)
    page.set_viewport_size({"width": 1280, "height": 1100})


def light_theme_end(page, frontend: Frontend, record: dict) -> None:
    record["final"] = page.evaluate(SNAPSHOT_JS)
    record["contrast_light"] = page.evaluate(CONTRAST_JS)
    record["screenshots"]["light"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-light.png",
                                          docs="dashboard-light.png" if frontend.docs else None)
    record["screenshots"]["light_page"] = shot(page, f"{frontend.page_name}-light.png")


def saved_run_output(page, path: Path, seconds: float = 20) -> list[dict]:
    """Save the notebook (Ctrl+S) and read back the run cell's outputs: what the page kept of them,
    the run's end update included."""
    before = path.stat().st_mtime_ns
    select_cell(page, 0)
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + seconds
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    notebook = None
    while notebook is None:  # the server may be between truncating the file and writing it (seen once, loaded)
        try:
            notebook = nbformat.read(path, as_version=4)
        except nbformat.reader.NotJSONError:
            if time.monotonic() > deadline:
                raise
            page.wait_for_timeout(200)
    saved = [dict(output.get("data", {})) for output in notebook.cells[1].outputs]
    for cell in notebook.cells:  # the page reopened next starts without outputs, as it did before this save
        cell.outputs, cell.execution_count = [], None
    nbformat.write(notebook, path)
    return saved


def dark_theme_reopened(lab, page, frontend: Frontend, record: dict) -> None:
    """The dark theme, set where JupyterLab keeps user settings, then the page opened anew;
    the same kernel shows the same run's dashboard again."""
    lab.set_theme(DARK)
    page.reload()
    frontend.wait_idle(page)
    record["theme"] = page.evaluate("() => document.body.dataset.jpThemeName")
    select_cell(page, 3)
    menu(page, "Run", "Run Selected Cell and Do not Advance")
    # both images (the curves, the timeline) drawn again from the kernel's widget state
    page.wait_for_function("() => { const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');"
                           " const images = d ? d.querySelectorAll(':scope > img') : [];"
                           " return images.length === 2 && [...images].every(i => i.naturalWidth > 0); }",
                           timeout=30_000)
    page.locator(".jp-Notebook .jp-Cell").nth(3).scroll_into_view_if_needed()
    record["dark"] = page.evaluate(SNAPSHOT_JS)
    record["contrast_dark"] = page.evaluate(CONTRAST_JS)
    record["screenshots"]["dark"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-dark.png",
                                         docs="dashboard-dark.png" if frontend.docs else None)
    record["screenshots"]["dark_page"] = shot(page, f"{frontend.page_name}-dark.png")
