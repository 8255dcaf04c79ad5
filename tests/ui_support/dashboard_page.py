"""One scenario for the browser tests: a real 2-worker run watched in a Jupyter page, recorded.

JupyterLab 4 and Notebook 7 build their pages from the same JupyterLab parts (.jp-Cell,
.jp-OutputArea, the Lumino menu bar), so the same steps and DOM probes serve both; a Frontend
says what differs (server, notebook URL, idle signal, screenshot names). While the workers
train, the page is read about three times a second, so the checks see the dashboard live:
worker 1 starts late, so the overview shows the chief waiting for it, then both training.
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

# tf-keras model.fit, verbose=1 (a live progress bar): about 18 s of training on 2 CPU workers. Worker 1
# comes late: it sleeps 14 s before creating its strategy, so the chief visibly waits for it, past the
# 10 s after which kwnb explains a wait (the banner shows for about 4 s, a dozen of the page's samples).
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
model.fit(dataset, epochs=4, steps_per_epoch=200, verbose=1)
print("DONE")
"""
CELLS = [
    "%load_ext kwnb",
    "%%kw_worker main.py -n 2\n" + FIT,
    "import time, kwnb\nrun = kwnb.get_run('main')\n"
    "print(f'kernel answered at {time.strftime(\"%H:%M:%S\")}: run {run.status}, {run.elapsed:.1f} s in')",
    "kwnb.get_run('main')  # the same live dashboard, e.g. after reopening the notebook",
]

# Everything the checks need, read from the page in one go. The dashboard's direct children, in order:
# title and Stop, the diagnoses banner, the overview, the tabs, the curves' note, the curves, the timeline.
SNAPSHOT_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  if (!d) return null;
  const [img, timeline] = d.querySelectorAll(':scope > img');
  const shown = e => !!e && e.getClientRects().length > 0 && e.offsetWidth > 0;
  const table = d.querySelector('table.kwnb-overview');
  const banner = d.querySelector(':scope > .widget-html > .widget-html-content > div');
  const folds = [...d.querySelectorAll('.widget-toggle-button')];
  return {
    labels: [...d.querySelectorAll('.lm-TabBar-tab .lm-TabBar-tabLabel')].map(e => e.textContent),
    bars: [...d.querySelectorAll('.widget-hprogress .progress-bar')].map(e => parseFloat(e.style.width) || 0),
    logs: [...d.querySelectorAll('.widget-html-content pre')].map(e => e.textContent),
    headers: [...d.querySelectorAll('.widget-html-content')].map(e => e.textContent).filter(t => t.includes('pid')),
    title: d.querySelector('.widget-html-content').textContent,
    img: img ? {src: img.src, rendered: img.complete && img.naturalWidth > 0, width: img.naturalWidth} : null,
    stop_disabled: d.querySelector('button').disabled,
    banner: banner ? banner.textContent : '',
    overview: table ? {
      columns: [...table.querySelectorAll('th')].map(e => e.textContent),
      rows: [...table.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent.trim())),
      rows_shown: [...table.querySelectorAll('tbody tr')].map(shown),  // drawn, not in a hidden tab
    } : null,
    folds: folds.map(e => ({text: e.textContent.trim(), shown: shown(e)})),
    // the log under the visible tab's toggle (the tab a person looks at)
    visible_log: (() => { const pre = [...d.querySelectorAll('.widget-html-content pre')].find(shown);
                          return pre ? pre.textContent : null; })(),
    timeline: timeline ? {src: timeline.src, rendered: timeline.complete && timeline.naturalWidth > 0,
                          width: timeline.naturalWidth, shown: shown(timeline), box_width: timeline.clientWidth,
                          below_curves: !shown(img) || timeline.getBoundingClientRect().top
                                                       >= img.getBoundingClientRect().bottom - 1} : null,
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
    // The %%kw_worker cell's output: the dashboard once, and its static account (for pages
    // without widgets) never shown beside it, also after the run's end updated that output.
    first_output: (() => { const area = document.querySelectorAll('.jp-Cell')[1].querySelector('.jp-OutputArea');
      const node = area.querySelector('.kwnb-dashboard');  // numbered once: a new number is a new element
      if (node && !node.dataset.kwnbNode) node.dataset.kwnbNode = String(window.kwnbNodes = (window.kwnbNodes || 0) + 1);
      return {dashboards: area.querySelectorAll('.kwnb-dashboard').length, node: node ? node.dataset.kwnbNode : null,
              dashboards_in_page: document.querySelectorAll('.kwnb-dashboard').length,
              static_in_page: [...document.querySelectorAll('.kwnb-static')].filter(shown).length}; })(),
    answers: [...document.querySelectorAll('.jp-Cell')].slice(2, 3)
      .map(c => c.querySelector('.jp-OutputArea').textContent.trim()),
  };
}"""

# How far the overview reaches past the dashboard's right edge, unless a box of its own scrolls it
# sideways (then the box's edge counts): a table cut off or widening the page is what a person minds.
OVERVIEW_OVERFLOW_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const table = d.querySelector('table.kwnb-overview');
  let edge = table;
  for (let e = table; e && e !== d; e = e.parentElement)
    if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) { edge = e; break; }
  return Math.round(edge.getBoundingClientRect().right - d.getBoundingClientRect().right);
}"""

# The elements reaching past the dashboard's right edge, unclipped by a scrolling box between them
# and the dashboard: what an overflow comes from.
TOO_WIDE_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const right = d.getBoundingClientRect().right;
  const clipped = e => { for (e = e.parentElement; e && e !== d; e = e.parentElement)
                           if (getComputedStyle(e).overflowX !== 'visible') return true; return false; };
  return [...d.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > right + 0.5 && !clipped(e))
    .slice(0, 6).map(e => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')} `
      + (e.parentElement === d ? `(the dashboard's child ${[...d.children].indexOf(e) + 1} of ${d.children.length}) ` : '')
      + `+${(e.getBoundingClientRect().right - right).toFixed(1)} px`);
}"""

# WCAG contrast of the dashboard's texts against what is really behind them: translucent layers
# (the banner's 10 % red) composited over the first opaque ancestor.
CONTRAST_JS = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
                               return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = e => {
    const layers = [];
    for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || c[3] === 1) { layers.push(c.slice(0, 3)); break; } if (c[3] > 0) layers.push(c); }
    if (layers.length === 0 || layers[layers.length - 1].length === 4) layers.push([255, 255, 255]);
    let [r, g, b] = layers.pop();
    for (const [lr, lg, lb, a] of layers.reverse()) [r, g, b] = [lr * a + r * (1 - a), lg * a + g * (1 - a), lb * a + b * (1 - a)];
    return [r, g, b]; };
  const ratio = e => { const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
                       return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); };
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const out = {};
  const pick = {title: '.widget-html-content b', badge: '.widget-html-content span',
                tab: '.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel',
                other_tab: '.lm-TabBar-tab:not(.lm-mod-current) .lm-TabBar-tabLabel',
                log: '.widget-html-content pre', label: '.widget-label', note: '.widget-html-content div',
                stop: 'button', fold: '.widget-toggle-button',
                overview_head: 'table.kwnb-overview th', overview_cell: 'table.kwnb-overview td',
                overview_badge: 'table.kwnb-overview td span',
                banner: ':scope > .widget-html > .widget-html-content > div'};
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
            record["saved"] = saved_run_output(page, root / "ui.ipynb")
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


def sample_until(page, record: dict, started: float, done: Callable, seconds: float = 5.0) -> dict:
    """Sample the page until done(snapshot) holds or `seconds` pass; the last snapshot."""
    deadline = time.monotonic() + seconds
    while not done(snapshot := sample(page, record, started)) and time.monotonic() < deadline:
        page.wait_for_timeout(150)
    return snapshot


def unfold_and_fold_again(page, record: dict, started: float) -> None:
    """Click the visible tab's toggle: TensorFlow's runtime lines show; click it again: folded away,
    so that the screenshots after this show the quiet log a learner sees by default."""
    toggle = page.locator(f"{DASHBOARD} .widget-toggle-button:visible").first
    record["folded"] = sample(page, record, started)
    toggle.click()
    record["unfolded"] = sample_until(page, record, started, lambda s: "I0000" in (s["visible_log"] or ""))
    toggle.click()
    record["refolded"] = sample_until(page, record, started, lambda s: "I0000" not in (s["visible_log"] or "I0000"))
    toggle.blur()  # no focus ring in the screenshots that follow


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
    notebook = nbformat.read(path, as_version=4)
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


# Checks of the overview, the quiet logs and the timeline, shared by the JupyterLab and Notebook 7 tests.
COLUMNS = ["task", "status", "phase", "progress", "rate", "CPU", "memory", "restarts"]


def phases(snapshot) -> list[str]:
    """Each overview row's phase, in the words the page shows ("waiting for peers")."""
    overview = snapshot and snapshot["overview"]
    return [row[COLUMNS.index("phase")] for row in overview["rows"]] if overview else []


def check_late_worker_shown_waiting(ui) -> None:
    """The chief waits in words while worker 1 starts; the banner names worker 1; then both train."""
    shown = [(s["t"], phases(s)) for s in ui["snapshots"]]
    waiting = [t for t, p in shown if p == ["waiting for peers", "starting"]]
    assert waiting, f"never the chief waiting while worker 1 starts: {sorted({tuple(p) for _, p in shown})}"
    assert any(p == ["training", "training"] and t > waiting[-1] for t, p in shown), "no training after the wait"
    banners = [s for s in ui["snapshots"] if s["banner"]]
    assert banners, "no diagnosis while the chief waited 14 s for worker 1"
    for s in banners:
        assert "waiting for peers" in s["banner"] and "for worker 1 to join" in s["banner"], s["banner"]
    # the banner and the table are two widgets, updated one after the other: some sample has both
    assert any(s["overview"]["rows"][1][0] == "\u26a0 worker 1" for s in banners), "no \u26a0 on worker 1's row"
    assert not ui["final"]["banner"], f"a diagnosis left after a clean run: {ui['final']['banner']}"


def check_overview_rows(ui) -> None:
    """Every task's row at once, with a recent rate and memory while training; at the end, peaks."""
    live = [s["overview"] for s in ui["snapshots"] if phases(s) == ["training", "training"]]
    assert live and all(o["columns"] == COLUMNS and all(o["rows_shown"]) for o in live)
    full = [o for o in live if all(re.fullmatch(r"\d+\.\d steps/s", r[4]) and float(r[4].split()[0]) > 0
                                   and re.fullmatch(r"\d+ MB", r[6]) and r[5].endswith(" %") for r in o["rows"])]
    assert full, f"no moment with both rows' rate, CPU and memory: {live[-1]['rows']}"
    assert [r[0] for r in full[0]["rows"]] == ["worker 0 (chief)", "worker 1"]
    for state in (ui["final"], ui["dark"]):
        rows = state["overview"]["rows"]
        assert [r[1] for r in rows] == ["FINISHED"] * 2 and phases(state) == ["finished"] * 2, rows
        assert all(re.fullmatch(r"peak \d+ MB", r[6]) and r[7] == "0" for r in rows), rows


def toggle_text(snapshot) -> str:
    """What the visible tab's fold toggle says, e.g. "21 TensorFlow runtime messages hidden - show"."""
    return next((f["text"] for f in snapshot["folds"] if f["shown"]), "")


def check_runtime_lines_folded(ui) -> None:
    """TensorFlow's runtime lines are out of the log while the toggle says so, in until it is clicked back."""
    folded = [s for s in ui["snapshots"] if s["visible_log"] and toggle_text(s).endswith("hidden - show")]
    assert folded and toggle_text(ui["folded"]).endswith("hidden - show"), ui["folded"]["folds"]
    assert int(toggle_text(ui["folded"]).split()[0]) >= 3, "fewer than 3 runtime lines counted"
    for s in folded:
        assert "I0000" not in s["visible_log"], f"a runtime line shows while folded, at {s['t']:.1f} s"
    assert "I0000" in ui["unfolded"]["visible_log"] and toggle_text(ui["unfolded"]).endswith("shown - hide")
    assert "I0000" not in ui["refolded"]["visible_log"] and toggle_text(ui["refolded"]).endswith("hidden - show")


def check_dashboard_shown_once(ui) -> None:
    """The live view shows the widgets only: one dashboard in the cell that started the run, and not
    the static account its output also carries, while the run goes and after its end updated that
    output; in the reopened page (whose unsaved outputs are gone) the one the last cell shows again."""
    live = [s["first_output"] for s in ui["snapshots"] if s] + [ui["final"]["first_output"]]
    seen = {(o["dashboards"], o["dashboards_in_page"], o["static_in_page"]) for o in live}
    assert seen == {(1, 1, 0)}, f"(dashboards in the run's cell, in the page, static accounts shown): {seen}"
    # The same element throughout, or a second one if the page redrew the whole widget when the run's
    # end replaced the output's bundle: never more.
    drawn = {o["node"] for o in live}
    assert 1 <= len(drawn) <= 2, f"the dashboard's element changed {len(drawn) - 1} times: {drawn}"
    reopened = ui["dark"]["first_output"]
    assert reopened["static_in_page"] == 0, reopened
    # The end's update_display_data reached the page's own copy of the output: the saved file holds
    # the final static account (an output holds the last bundle sent for its display id).
    (saved,) = [data for data in ui["saved"] if "application/vnd.jupyter.widget-view+json" in data]
    assert "kwnb-static" in saved["text/html"] and "exit codes: 0, 0" in saved["text/html"], saved["text/html"][:300]
    assert saved["text/html"].count("data:image/png;base64,") == 2 and "still going" not in saved["text/html"]


def check_timeline_drawn(ui) -> None:
    """The timeline under the curves, redrawn while the run goes, drawn again in the reopened page."""
    live = {s["timeline"]["src"] for s in during_run(ui) if s["timeline"] and s["timeline"]["rendered"]}
    assert len(live) >= 2, "the timeline did not change while the run went on"
    for state in (ui["final"], ui["dark"], ui["narrow_snapshot"]):
        timeline = state["timeline"]
        assert timeline["rendered"] and timeline["shown"] and timeline["width"] > 300 and timeline["below_curves"]
        assert timeline["box_width"] <= timeline["width"] * 1.05, "the timeline is upscaled (blurred)"
