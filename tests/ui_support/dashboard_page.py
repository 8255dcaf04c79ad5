"""One scenario for the browser tests: a real 2-worker run watched in a Jupyter page, recorded.

JupyterLab 4 and Notebook 7 build their pages from the same JupyterLab parts (.jp-Cell,
.jp-OutputArea, the Lumino menu bar), so the same steps and DOM probes serve both; a Frontend
says what differs (server, notebook URL, idle signal, screenshot names). While the workers
train, the page is read about three times a second, so the checks see the dashboard live.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from .lab import CHROMIUM, CHROMIUM_ARGS, DARK

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build" / "ui-screenshots"
DOCS_IMAGES = REPO / "docs" / "images"
DASHBOARD = ".jp-OutputArea .kwnb-dashboard"

# tf-keras model.fit, verbose=1 (a live progress bar): about 15 s of training on 2 CPU workers.
FIT = """\
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(1024, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(dataset, epochs=4, steps_per_epoch=250, verbose=1)
print("DONE")
"""
CELLS = [
    "%load_ext kwnb",
    "%%kw_worker main.py -n 2\n" + FIT,
    "import time, kwnb\nrun = kwnb.get_run('main')\n"
    "print(f'kernel answered at {time.strftime(\"%H:%M:%S\")}: run {run.status}, {run.elapsed:.1f} s in')",
    "kwnb.get_run('main')  # the same live dashboard, e.g. after reopening the notebook",
]

# Everything the checks need, read from the page in one go.
SNAPSHOT_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  if (!d) return null;
  const img = d.querySelector('img');
  return {
    labels: [...d.querySelectorAll('.lm-TabBar-tab .lm-TabBar-tabLabel')].map(e => e.textContent),
    bars: [...d.querySelectorAll('.widget-hprogress .progress-bar')].map(e => parseFloat(e.style.width) || 0),
    logs: [...d.querySelectorAll('.widget-html-content pre')].map(e => e.textContent),
    headers: [...d.querySelectorAll('.widget-html-content')].map(e => e.textContent).filter(t => t.includes('pid')),
    title: d.querySelector('.widget-html-content').textContent,
    img: img ? {src: img.src, rendered: img.complete && img.naturalWidth > 0, width: img.naturalWidth} : null,
    stop_disabled: d.querySelector('button').disabled,
    // Layout probes, for what a person sees rather than what the DOM holds:
    clipped_labels: [...d.querySelectorAll('.lm-TabBar-tab .lm-TabBar-tabLabel')]
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent),
    log_at_bottom: (() => {  // is the newest line of the visible (chief's) log in view?
      const pre = [...d.querySelectorAll('.widget-html-content pre')].find(e => e.offsetParent);
      // Geometry, not scrollTop: the pre's last line must sit inside its scrolling box's visible area.
      for (let e = pre && pre.parentElement; e && e !== d; e = e.parentElement)
        if (e.scrollHeight > e.clientHeight + 2)
          return pre.getBoundingClientRect().bottom <= e.getBoundingClientRect().bottom + 2;
      return true; })(),
    img_box: img ? {shown: img.offsetWidth > 0 && img.offsetHeight > 0, width: img.clientWidth} : null,
    answers: [...document.querySelectorAll('.jp-Cell')].slice(2, 3)
      .map(c => c.querySelector('.jp-OutputArea').textContent.trim()),
  };
}"""

# WCAG contrast of the dashboard's texts against what is really behind them (first opaque ancestor).
CONTRAST_JS = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
                               return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = e => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
                               if (c.length === 3 || c[3] > 0.5) return c.slice(0, 3); } return [255, 255, 255]; };
  const ratio = e => { const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
                       return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); };
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const out = {};
  const pick = {title: '.widget-html-content b', badge: '.widget-html-content span',
                tab: '.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel',
                other_tab: '.lm-TabBar-tab:not(.lm-mod-current) .lm-TabBar-tabLabel',
                log: '.widget-html-content pre', label: '.widget-label', note: '.widget-html-content div',
                stop: 'button'};
  for (const [name, selector] of Object.entries(pick)) {
    const e = d.querySelector(selector);
    if (e && !e.disabled) out[name] = ratio(e);  // a disabled control is exempt from contrast rules
  }
  return out;
}"""


@dataclass(frozen=True)
class Frontend:
    """What differs between the Jupyter pages the scenario runs in."""
    server: Callable  # (root, home) -> context manager yielding a ui_support.lab.Lab
    path: str  # the notebook's page, under the server's URL
    wait_idle: Callable  # (page) -> None once the kernel is connected and idle
    prefix: str = ""  # of the dashboard screenshots' names in SHOTS
    page_name: str = "lab"  # whole-page screenshots are PAGE_NAME-light.png, PAGE_NAME-dark.png
    docs: bool = False  # the README's images come from this page (copied with KWNB_UPDATE_DOCS_IMAGES=1)
    after_open: Callable | None = None  # (page) -> None, e.g. fold a side panel away


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def select_cell(page, index: int) -> None:
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").click()


def shot(target, name: str, docs: str | None = None) -> Path:
    path = SHOTS / name
    target.screenshot(path=str(path))
    if docs and os.environ.get("KWNB_UPDATE_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / docs)
    return path


def running(snapshot) -> bool:
    return bool(snapshot and snapshot["labels"]) and all(l.endswith(": running") for l in snapshot["labels"])


def during_run(ui):
    return [s for s in ui["snapshots"] if running(s)]


def write_notebook(path: Path) -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(notebook, path)


def record_session(frontend: Frontend, base: Path) -> dict:
    """Open the notebook, run it, watch the run to its end, then reopen the page in the dark theme."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # the browser is there, so this is a broken setup, not a reason to skip
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    SHOTS.mkdir(parents=True, exist_ok=True)
    root = base / "notebooks"
    root.mkdir()
    write_notebook(root / "ui.ipynb")

    record = {"snapshots": [], "screenshots": {}, "timings": {}}
    started = time.monotonic()
    with frontend.server(root, base / "home") as lab, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        try:
            page.goto(lab.url(frontend.path))
            frontend.wait_idle(page)
            if frontend.after_open:
                frontend.after_open(page)
            record["timings"]["idle"] = time.monotonic() - started
            watch_training(page, frontend, record, started)
            light_theme_end(page, frontend, record)
            dark_theme_reopened(lab, page, frontend, record)
        except Exception:
            page.screenshot(path=str(SHOTS / f"{frontend.prefix}failure.png"))
            raise
        finally:
            browser.close()
            record["timings"]["total"] = time.monotonic() - started
            # for a post-mortem
            (SHOTS / f"{frontend.prefix}record.json").write_text(json.dumps(record, default=str, indent=1))
    return record


def watch_training(page, frontend: Frontend, record: dict, started: float) -> None:
    """Run the first three cells (load, %%kw_worker, a quick question to the kernel) and watch."""
    select_cell(page, 3)
    menu(page, "Run", "Run All Above Selected Cell")
    page.locator(DASHBOARD).wait_for(timeout=60_000)
    asked_again = narrow_done = running_shot = False
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        snapshot = page.evaluate(SNAPSHOT_JS)
        snapshot["t"] = time.monotonic() - started
        record["snapshots"].append(snapshot)
        chief_progress = snapshot["bars"][0] if snapshot["bars"] else 0
        if running(snapshot) and 5 < chief_progress < 90 and not asked_again:
            # Ask the kernel again mid-training, as a person would while watching.
            select_cell(page, 2)
            menu(page, "Run", "Run Selected Cell and Do not Advance")
            asked_again = True
        if running(snapshot) and chief_progress >= 35 and not running_shot:
            record["contrast_running"] = page.evaluate(CONTRAST_JS)
            record["screenshots"]["running"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-running.png",
                                                    docs="dashboard.png" if frontend.docs else None)
            running_shot = True
        if running(snapshot) and chief_progress >= 55 and not narrow_done:
            narrow(page, frontend, record)
            narrow_done = True
        if snapshot["stop_disabled"]:  # the run is over (finished, failed or stopped)
            break
        page.wait_for_timeout(300)
    record["timings"]["finished"] = time.monotonic() - started
    page.wait_for_timeout(2000)  # the last curves redraw
    if not running_shot:  # a run too quick to catch mid-way: the checks say so
        shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-running.png")
    if not narrow_done:
        narrow(page, frontend, record)


def narrow(page, frontend: Frontend, record: dict) -> None:
    """A 700 px wide window: the screenshot, and how far the dashboard overflows its cell."""
    page.set_viewport_size({"width": 700, "height": 1100})
    page.wait_for_timeout(600)
    record["screenshots"]["narrow"] = shot(page, f"{frontend.prefix}dashboard-narrow-700px.png",
                                           docs="dashboard-narrow.png" if frontend.docs else None)
    record["narrow_overflow"] = page.evaluate(
        "() => { const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');"
        " return d.scrollWidth - d.clientWidth; }")
    page.set_viewport_size({"width": 1280, "height": 1100})


def light_theme_end(page, frontend: Frontend, record: dict) -> None:
    record["final"] = page.evaluate(SNAPSHOT_JS)
    record["contrast_light"] = page.evaluate(CONTRAST_JS)
    record["screenshots"]["light"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-light.png",
                                          docs="dashboard-light.png" if frontend.docs else None)
    record["screenshots"]["light_page"] = shot(page, f"{frontend.page_name}-light.png")


def dark_theme_reopened(lab, page, frontend: Frontend, record: dict) -> None:
    """The dark theme, set where JupyterLab keeps user settings, then the page opened anew;
    the same kernel shows the same run's dashboard again."""
    lab.set_theme(DARK)
    page.reload()
    frontend.wait_idle(page)
    record["theme"] = page.evaluate("() => document.body.dataset.jpThemeName")
    select_cell(page, 3)
    menu(page, "Run", "Run Selected Cell and Do not Advance")
    page.locator(f"{DASHBOARD} img").wait_for(timeout=30_000)
    page.wait_for_function("() => document.querySelector('.jp-OutputArea .kwnb-dashboard img').naturalWidth > 0")
    page.locator(".jp-Notebook .jp-Cell").nth(3).scroll_into_view_if_needed()
    record["dark"] = page.evaluate(SNAPSHOT_JS)
    record["contrast_dark"] = page.evaluate(CONTRAST_JS)
    record["screenshots"]["dark"] = shot(page.locator(DASHBOARD), f"{frontend.prefix}dashboard-dark.png",
                                         docs="dashboard-dark.png" if frontend.docs else None)
    record["screenshots"]["dark_page"] = shot(page, f"{frontend.page_name}-dark.png")
