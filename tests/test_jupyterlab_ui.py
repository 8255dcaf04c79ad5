"""The dashboard as a person sees it: JupyterLab in headless Chromium, a real 2-worker run.

One scenario (module fixture `ui`), several checks on what it recorded. JupyterLab runs on
127.0.0.1 with a token and its own settings (no news, no update check); Playwright drives
Debian's /usr/bin/chromium. While the workers train, the fixture reads the dashboard from the
DOM about three times a second, so the checks see it live, not only its final state.

Screenshots go to build/ui-screenshots/; with KWNB_UPDATE_DOCS_IMAGES=1 the ones the README
uses are copied to docs/images/ too.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from ui_support.lab import CHROMIUM, CHROMIUM_ARGS, DARK, jupyterlab

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason=f"no {CHROMIUM}: the browser test needs Debian's chromium (apt-get install chromium)"),
]

REPO = Path(__file__).resolve().parents[1]
SHOTS = REPO / "build" / "ui-screenshots"
DOCS_IMAGES = REPO / "docs" / "images"

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


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def select_cell(page, index: int) -> None:
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-InputPrompt").click()


def wait_idle(page, timeout: float = 90) -> None:
    """The status bar's kernel item, e.g. 'Python 3 (ipykernel) | Idle'."""
    page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"Python 3.*\| Idle")).wait_for(timeout=timeout * 1000)


def shot(target, name: str, docs: str | None = None) -> Path:
    path = SHOTS / name
    target.screenshot(path=str(path))
    if docs and os.environ.get("KWNB_UPDATE_DOCS_IMAGES"):
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / docs)
    return path


def running(snapshot) -> bool:
    return bool(snapshot and snapshot["labels"]) and all(l.endswith(": running") for l in snapshot["labels"])


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # the browser is there, so this is a broken setup, not a reason to skip
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    SHOTS.mkdir(parents=True, exist_ok=True)
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(notebook, root / "ui.ipynb")

    record = {"snapshots": [], "screenshots": {}, "timings": {}}
    started = time.monotonic()
    with jupyterlab(root, base / "home") as lab, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        try:
            page.goto(lab.url("lab/tree/ui.ipynb"))
            wait_idle(page)
            page.keyboard.press("Control+b")  # fold the file browser away: more room for the notebook
            record["timings"]["idle"] = time.monotonic() - started

            # Run the first three cells (load, %%kw_worker, a quick question to the kernel).
            select_cell(page, 3)
            menu(page, "Run", "Run All Above Selected Cell")
            page.locator(".jp-OutputArea .kwnb-dashboard").wait_for(timeout=60_000)
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
                    record["screenshots"]["running"] = shot(page.locator(".jp-OutputArea .kwnb-dashboard"),
                                                            "dashboard-running.png", docs="dashboard.png")
                    running_shot = True
                if running(snapshot) and chief_progress >= 55 and not narrow_done:
                    narrow(page, record)
                    narrow_done = True
                if snapshot["stop_disabled"]:  # the run is over (finished, failed or stopped)
                    break
                page.wait_for_timeout(300)
            record["timings"]["finished"] = time.monotonic() - started
            page.wait_for_timeout(2000)  # the last curves redraw
            if not running_shot:  # a run too quick to catch mid-way: the checks below say so
                shot(page.locator(".jp-OutputArea .kwnb-dashboard"), "dashboard-running.png")
            if not narrow_done:
                narrow(page, record)
            record["final"] = page.evaluate(SNAPSHOT_JS)
            record["contrast_light"] = page.evaluate(CONTRAST_JS)
            record["screenshots"]["light"] = shot(page.locator(".jp-OutputArea .kwnb-dashboard"),
                                                  "dashboard-light.png", docs="dashboard-light.png")
            record["screenshots"]["light_page"] = shot(page, "lab-light.png")

            # The dark theme, set where JupyterLab keeps user settings, then the page opened anew;
            # the same kernel shows the same run's dashboard again.
            lab.set_theme(DARK)
            page.reload()
            wait_idle(page)
            record["theme"] = page.evaluate("() => document.body.dataset.jpThemeName")
            select_cell(page, 3)
            menu(page, "Run", "Run Selected Cell and Do not Advance")
            page.locator(".jp-OutputArea .kwnb-dashboard img").wait_for(timeout=30_000)
            page.wait_for_function("() => document.querySelector('.jp-OutputArea .kwnb-dashboard img').naturalWidth > 0")
            page.locator(".jp-Notebook .jp-Cell").nth(3).scroll_into_view_if_needed()
            record["dark"] = page.evaluate(SNAPSHOT_JS)
            record["contrast_dark"] = page.evaluate(CONTRAST_JS)
            record["screenshots"]["dark"] = shot(page.locator(".jp-OutputArea .kwnb-dashboard"),
                                                 "dashboard-dark.png", docs="dashboard-dark.png")
            record["screenshots"]["dark_page"] = shot(page, "lab-dark.png")
        except Exception:
            page.screenshot(path=str(SHOTS / "failure.png"))
            raise
        finally:
            browser.close()
            record["timings"]["total"] = time.monotonic() - started
            (SHOTS / "record.json").write_text(json.dumps(record, default=str, indent=1))  # for a post-mortem
    return record


def narrow(page, record) -> None:
    """A 700 px wide window: the screenshot, and how far the dashboard overflows its cell."""
    page.set_viewport_size({"width": 700, "height": 1100})
    page.wait_for_timeout(600)
    record["screenshots"]["narrow"] = shot(page, "dashboard-narrow-700px.png", docs="dashboard-narrow.png")
    record["narrow_overflow"] = page.evaluate(
        "() => { const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');"
        " return d.scrollWidth - d.clientWidth; }")
    page.set_viewport_size({"width": 1280, "height": 1100})


def during_run(ui):
    return [s for s in ui["snapshots"] if running(s)]


def test_a_tab_per_worker(ui):
    labels = ui["final"]["labels"]
    assert [l.split(":")[0] for l in labels] == ["worker 0 (chief)", "worker 1"]
    assert len(ui["final"]["logs"]) == len(ui["final"]["bars"]) == 2


def test_log_lines_arrive_while_the_run_goes_on(ui):
    live = during_run(ui)
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
    for theme in ("contrast_running", "contrast_light", "contrast_dark"):
        low = {k: round(v, 2) for k, v in ui[theme].items() if v < 4.5}
        assert not low, f"{theme}: text below WCAG AA contrast 4.5:1: {low}"


def test_narrow_width_stays_inside_the_page(ui):
    assert ui["screenshots"]["narrow"].exists()
    assert ui["narrow_overflow"] <= 2, f"the dashboard is {ui['narrow_overflow']} px wider than its cell at 700 px"


# What a person sees but the DOM alone does not say (each was a real problem of the dashboard once).

def test_tab_labels_are_not_clipped(ui):
    assert not ui["final"]["clipped_labels"] and not ui["dark"]["clipped_labels"]


def test_log_tail_shows_the_newest_lines(ui):
    live = [s for s in during_run(ui) if s["bars"] and s["bars"][0] > 0]
    assert live and all(s["log_at_bottom"] for s in live)


def test_curves_are_not_upscaled(ui):
    assert ui["final"]["img_box"]["width"] <= ui["final"]["img"]["width"] * 1.05


def test_no_broken_image_before_the_first_curves(ui):
    first = ui["snapshots"][0]
    assert not (first["img_box"] and first["img_box"]["shown"] and not first["img"]["rendered"])
