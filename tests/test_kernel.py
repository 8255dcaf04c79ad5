"""The magics in a real Jupyter kernel (nbclient), with a real 2-worker TensorFlow run.

nbclient saves widget state once, at the end, so this checks the dashboard's final state;
live updates in a browser are the JupyterLab UI test's job. The same run, published: converted
by nbconvert with the widget state nbclient kept and without it, read with no script run (as
GitHub, an offline copy or a blocked CDN show it) and in Chromium with the network cut; and
reopened by a new kernel with kwnb.open_run.
"""
import base64
import copy
import io
import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter, MarkdownExporter
from PIL import Image

from kwnb.notebook.static import hide_account_css
from kwnb.pictures.timeline import PHASE_COLOURS

SCRIPT = (Path(__file__).parent / "scripts" / "keras_fit.py").read_text()
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# A TensorBoard callback: the kernel reads the run's event files, and its first read imports TensorFlow mid-run
# (test_tensorflow_start_up_lines_never_reach_the_wait_cell, which once made a run of its own: about 26 s).
TENSORBOARD_FIT = SCRIPT.replace(
    "m.fit(ds, epochs=3, steps_per_epoch=20, verbose=verbose)",
    "logs = 'logs' if json.loads(os.environ['TF_CONFIG'])['task']['index'] == 0 else 'logs-worker'\n"
    "m.fit(ds, epochs=3, steps_per_epoch=20, verbose=verbose, callbacks=[tf.keras.callbacks.TensorBoard(logs)])")


@pytest.fixture(scope="module")
def executed_in(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernel")
    cells = [
        "%load_ext kwnb",
        "%%kw_worker main.py -n 2 --args 1\n" + TENSORBOARD_FIT,
        "import kwnb\nprint('run is', 'done' if kwnb.get_run('main').done else 'still going')",
        "%kw_wait main",
        "print(kwnb.get_run('main').exit_codes, [r['epoch'] for r in kwnb.get_run('main').history()])",
        ACCOUNT.format(run="kwnb.get_run('main')"),
        "import sys\nprint('tensorflow' in sys.modules, [r['epoch'] for r in kwnb.get_run('main').history()])",
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTEST_CURRENT_TEST", raising=False)  # else ipykernel forwards no descriptor-2 output, as under pytest
        return execute(cells, folder), folder


# What a run shows of itself, printed the same way from the live run and from the reopened one.
ACCOUNT = ("import json\nr = {run}\nprint(json.dumps([r.exit_codes, r.history(), r.status, "
           "[[d.kind, d.task, d.message] for d in r.diagnoses], [[d.kind, d.task] for d in r.diagnosis_history]]))")


def execute(cells, folder):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=180, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


@pytest.fixture(scope="module")
def executed(executed_in):
    return executed_in[0]


def text_of(cell) -> str:
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.outputs)


def test_cell_returns_a_dashboard_and_the_kernel_stays_free(executed):
    display, account = executed.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in display["data"]
    # the widgets' output leaves pages without widgets to the account, its own output after it
    assert display["data"]["text/html"] == "" and list(account["data"]) == ["text/html"]
    assert 'class="kwnb-static"' in account["data"]["text/html"]
    # brought up to date when the run ended (update_display_data): the summary as text/plain
    assert display["data"]["text/plain"].startswith("kwnb run 'main': finished")
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
    pngs = [base64.b64decode(image["buffers"][0]["data"]) for image in (curves, timeline)]
    assert all(png.startswith(b"\x89PNG") and Image.open(io.BytesIO(png)).width >= 600 for png in pngs)
    assert len(pngs[0]) > 10_000  # curves drawn, not an empty frame
    training = tuple(int(PHASE_COLOURS["training"][i:i + 2], 16) for i in (1, 3, 5))
    assert training in {colour for _, colour in Image.open(io.BytesIO(pngs[1])).convert("RGB").getcolors(1 << 16)}
    (overview,) = [m["state"]["value"] for m in by_name["HTMLModel"] if "kwnb-overview" in m["state"]["value"]
                   and "<table" in m["state"]["value"]]
    assert overview.count("<tr>") == 3 and overview.count("FINISHED") == 2 and "peak" in overview
    # The kernel's first dashboard says what to look at, once (notebook/dashboard.py GUIDE).
    assert sum("What to look at" in m["state"]["value"] for m in by_name["HTMLModel"]) == 1


def test_published_html_without_widget_state_shows_the_run(executed):
    """nbconvert without the widget state (Jupyter Book, nbviewer, a notebook saved by JupyterLab)
    shows the dashboard's static account: overview, summary, and the curves and timeline as images."""
    bare = copy.deepcopy(executed)
    bare.metadata.pop("widgets", None)
    page, _ = HTMLExporter().from_notebook_node(bare)
    assert page.count('class="kwnb-static"') == 1 and "kwnb-overview" in page
    # The summary once, as %kw_wait printed it: the account left its own copy out (issue 32).
    assert page.count("kwnb run &#39;main&#39;: finished") + page.count("kwnb run 'main': finished") == 1
    assert page.count("exit codes: 0, 0") == 1 and "3 epochs, last: loss" in page
    static = page[page.index('class="kwnb-static"'):]
    images = [base64.b64decode(chunk.split('"')[0]) for chunk in static.split("data:image/png;base64,")[1:3]]
    assert len(images) == 2 and all(png.startswith(b"\x89PNG") and len(png) > 2_000 for png in images)
    # Palette PNGs (a quarter of the bytes), pictures still the size drawn: ~20 KB a run, not ~70.
    assert [Image.open(io.BytesIO(png)).mode for png in images] == ["P", "P"]
    assert all(Image.open(io.BytesIO(png)).width >= 600 for png in images)
    account = executed.cells[1].outputs[1]["data"]["text/html"]
    assert len(account) < 30_000, len(account)
    assert "still going" not in account.lower()  # the run's end reached it
    # The run's end, not the machine's memory when it ended; no summary of its own: %kw_wait prints it below.
    assert "kwnb-overview-memory" not in account and "<details>" not in account and "exit codes" not in account
    markdown, _ = MarkdownExporter().from_notebook_node(bare)
    assert markdown.count("data:image/png;base64,") >= 2 and markdown.count("exit codes: 0, 0") == 1


def published(executed, state: str) -> str:
    """The executed notebook as nbconvert's HTML, with the widget state nbclient kept or without it."""
    notebook = copy.deepcopy(executed)
    if state == "removed":
        notebook.metadata.pop("widgets")
    return HTMLExporter().from_notebook_node(notebook)[0]


@pytest.mark.parametrize("state", ["kept", "removed"])
def test_published_html_shows_the_run_with_no_script_run(executed, state):
    """With the widget state, nbconvert draws the widgets' output as a script for a CDN's widget
    renderer; without scripts (GitHub, an offline copy, a blocked CDN) the account shows, once,
    with the overview and both pictures, state or none."""
    page = published(executed, state)
    assert ("application/vnd.jupyter.widget-view+json" in page) == (state == "kept")
    bare = re.sub(r"<script\b.*?</script>", "", page, flags=re.S | re.I)
    assert bare.count('class="kwnb-static"') == 1
    static = bare[bare.index('class="kwnb-static"'):]
    overview = static[static.index('<table class="kwnb-overview'):static.index("</table>")]
    assert overview.count("<tr>") == 3 and overview.count("FINISHED") == 2
    images = [Image.open(io.BytesIO(base64.b64decode(chunk.split('"')[0])))
              for chunk in static.split("data:image/png;base64,")[1:]]
    assert len(images) == 2 and all(image.width >= 600 and image.height >= 100 for image in images)
    # What hides the account came with the widgets' state, a script's text: gone with the scripts.
    account_class = executed.cells[1].outputs[1]["data"]["text/html"].split('"')[1]
    hiding = hide_account_css(account_class)
    assert account_class.startswith("kwnb-") and hiding not in bare and (hiding in page) == (state == "kept")


def test_published_page_shows_the_run_with_the_network_cut(executed, tmp_path):
    """The page as nbconvert made it (widget state and scripts kept) in Chromium with no network:
    the widget renderer from the CDN never comes, and the account is what a reader sees."""
    from playwright.sync_api import sync_playwright

    from ui_support.dashboard_page import SHOTS
    from ui_support.lab import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}")
    path = tmp_path / "published.html"
    path.write_text(published(executed, "kept"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                             args=CHROMIUM_ARGS + ["--host-resolver-rules=MAP * ~NOTFOUND"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            failed = []
            page.on("requestfailed", lambda request: failed.append(request.url))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_timeout(1000)  # the widget loader's script fails: nothing replaces the account
            seen = page.evaluate(OFFLINE_ACCOUNT_JS)
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.locator(".kwnb-static").screenshot(path=str(SHOTS / "published-offline.png"))
        finally:
            browser.close()
    assert any("@jupyter-widgets/html-manager" in url for url in failed), failed  # it tried, and the CDN was cut
    assert seen["accounts"] == 1 and seen["shown"] and seen["dashboards"] == 0, seen
    assert "worker 0 (chief)\tFINISHED" in seen["text"] and "worker 1\tFINISHED" in seen["text"], seen["text"][:300]
    assert len(seen["images"]) == 2 and all(width >= 600 and shown for width, shown in seen["images"]), seen["images"]


# The published page's account as a reader sees it: drawn, its text, its pictures decoded and on screen.
OFFLINE_ACCOUNT_JS = """() => {
  const accounts = document.querySelectorAll('.kwnb-static');
  const account = accounts[0];
  const shown = e => !!e && e.getClientRects().length > 0 && e.offsetWidth > 0 && e.offsetHeight > 0;
  return {accounts: accounts.length, shown: shown(account), text: account ? account.innerText : '',
          dashboards: document.querySelectorAll('.kwnb-dashboard').length,
          images: account ? [...account.querySelectorAll('img')].map(i => [i.naturalWidth, shown(i)]) : []};
}"""


def test_a_restarted_kernel_reopens_the_run(executed_in):
    """A new kernel (the learner's next day): open_run shows what the live run showed, %kw_runs
    lists it and %kw_show draws its dashboard again, curves included."""
    executed, folder = executed_in
    reopened = execute(["%load_ext kwnb", "import kwnb\n" + ACCOUNT.format(run="kwnb.open_run('main')"),
                        "%kw_runs", "%kw_show main"], folder)
    live = json.loads(text_of(executed.cells[5]))
    past = json.loads(text_of(reopened.cells[1]))
    assert past == live and live[0] == [0, 0] and [row["epoch"] for row in live[1]] == [0, 1, 2]
    (listed,) = text_of(reopened.cells[2]).splitlines()
    assert listed.startswith("main") and "finished" in listed and "2 tasks" in listed
    shown, shown_account = reopened.cells[3].outputs
    assert "application/vnd.jupyter.widget-view+json" in shown["data"]
    assert shown["data"]["text/plain"].startswith("kwnb run 'main': finished")
    assert shown_account["data"]["text/html"].count("data:image/png;base64,") == 2


def test_tensorflow_start_up_lines_never_reach_the_wait_cell(executed):
    """The run's TensorBoard callback: the kernel reads its event files, and its first read imports TensorFlow mid-run,
    whose C++ start-up lines landed as red stderr in the %kw_wait cell (issue 29), or in whichever cell ran then. The kernel never imported
    TensorFlow before (no cell does), as in a learner's notebook that only launches and waits."""
    assert "callbacks=[tf.keras.callbacks.TensorBoard(logs)]" in TENSORBOARD_FIT
    assert "kwnb run 'main': finished" in text_of(executed.cells[3])
    stderr = [(i, o) for i, cell in enumerate(executed.cells) for o in cell.outputs if o.get("name") == "stderr"]
    assert stderr == [], stderr  # the %kw_wait cell's, or a later one's where the first read comes later
    assert text_of(executed.cells[6]).strip() == "True [0, 1, 2]"  # the kernel did import it, and read the curves


def test_a_last_cell_that_only_waits_keeps_the_final_account(tmp_path):
    """`run.wait()` returns when the tasks have ended and the pictures follow; nbclient saves the notebook after
    the last cell, so the dashboard's end (its update, with both pictures) is sent before that cell ends."""
    from test_outputs import FIT  # Keras-like progress, no TensorFlow

    (tmp_path / "fit.py").write_text(FIT)
    executed = execute(["%load_ext kwnb", "import kwnb\nrun = kwnb.launch('fit.py', n=1, name='fit')\nrun",
                        "run.wait()"], tmp_path)
    display, account = executed.cells[1].outputs
    assert display["data"]["text/plain"].startswith("kwnb run 'fit': finished")
    assert account["data"]["text/html"].count("data:image/png;base64,") == 2  # the curves and the timeline
    assert "curves:" in account["data"]["text/html"]  # the summary names the pictures drawn
