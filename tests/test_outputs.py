"""What a run's end costs the kernel, and a dashboard with many tasks: the end-of-run pictures drawn in a
subprocess (where the kernel has not loaded matplotlib) are the files drawn in-process; the live timeline
is drawn with Pillow; only the shown tab is kept current; the overview puts the task that matters first."""
from __future__ import annotations

import importlib

import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image

import kwnb
from kwnb.pictures.outputs import draw
from kwnb.pictures.timeline import PHASE_COLOURS, timeline_data, timeline_png

ROOT = Path(__file__).resolve().parent.parent
BEHAVE = Path(__file__).parent / "scripts" / "behave.py"
# Keras-like output, no TensorFlow: two epochs of progress lines, so the run has curves to draw.
FIT = """import time
for epoch in range(2):
    print(f"Epoch {epoch + 1}/2", flush=True)
    for step in range(1, 6):
        print(f"{step}/5 [====] - loss: {1.0 / (epoch * 5 + step):.4f}", end="\\r" if step < 5 else "\\n", flush=True)
        time.sleep(0.05)
"""
IN_FRESH_PYTHON = """
import json, sys
import kwnb
from kwnb.pictures.outputs import drawing_plan
run = kwnb.launch(sys.argv[1], n=2, name="fit", runs_dir=sys.argv[2], network="host", warm=False)
run.wait(120)
print(json.dumps({"dir": str(run.dir), "plan": drawing_plan(run), "codes": run.exit_codes, "notes": run.notes,
                  "matplotlib": "matplotlib.figure" in sys.modules}))
"""


def pixels(path) -> np.ndarray:  # a path or a file object
    return np.asarray(Image.open(path).convert("RGBA"))


def test_pictures_drawn_in_a_subprocess_are_those_drawn_here(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    done = subprocess.run([sys.executable, "-c", IN_FRESH_PYTHON, str(script), str(tmp_path / "runs")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["codes"] == [0, 0] and result["notes"] == []
    assert not result["matplotlib"], "the launching process imported matplotlib: it should have drawn elsewhere"
    run_dir, plan = Path(result["dir"]), result["plan"]
    assert len(plan["curves"]["series"]["fit"]["epochs"]) == 2
    summary = (run_dir / "summary.txt").read_text()
    assert f"curves: {run_dir / 'curves.png'}" in summary and f"timeline: {run_dir / 'timeline.png'}" in summary
    plan["curves"]["path"], plan["timeline"]["path"] = str(tmp_path / "c.png"), str(tmp_path / "t.png")
    assert draw(plan) == []  # the same plan, drawn in this process
    for name, here in (("curves.png", "c.png"), ("timeline.png", "t.png")):
        assert np.array_equal(pixels(run_dir / name), pixels(tmp_path / here)), name


RUNS_IN_A_LOOP = """
import json, sys
import kwnb
from kwnb.pictures import outputs, painter
elsewhere, real = [], outputs.draw_elsewhere
outputs.draw_elsewhere = lambda plan: elsewhere.append(plan) or real(plan)
for i in range(3):
    run = kwnb.launch(sys.argv[1], n=2, name=f"fit{i}", runs_dir=sys.argv[2], network="host", warm=False)
    run.wait(120, pictures=True)
    print(json.dumps({"dir": str(run.dir), "notes": run.notes, "elsewhere": len(elsewhere),
                      "painter": painter.painter().running, "matplotlib": "matplotlib.figure" in sys.modules}))
"""


def test_a_process_whose_runs_end_one_after_another_draws_from_the_second_in_its_painter(tmp_path):
    """One subprocess for the first run's curves, then the process's painter for the next ones (a sweep, a loop of
    kwnb.launch, a test suite): one matplotlib import more in all, not one a run; and still none in the process."""
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    done = subprocess.run([sys.executable, "-c", RUNS_IN_A_LOOP, str(script), str(tmp_path / "runs")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=400,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [(r["elsewhere"], r["painter"]) for r in runs] == [(1, False), (1, True), (1, True)], runs
    assert not any(r["matplotlib"] for r in runs) and all(r["notes"] == [] for r in runs)
    for run in runs:
        assert (Path(run["dir"]) / "curves.png").is_file() and (Path(run["dir"]) / "timeline.png").is_file()


def fake_run(phases_by_task, ended_at=None):
    """A RunSnapshot (what every renderer reads) of tasks with these phases."""
    from kwnb.engine.records.snapshot import RunSnapshot, TaskView
    from kwnb.task.tf_config import TaskId

    tasks = tuple(TaskView(position=position, id=TaskId("worker", position), is_chief=position == 0,
                           status=phases[-1][1], phase=phases[-1][1], phases=tuple(phases), ended_at=ended_at)
                  for position, phases in enumerate(phases_by_task))
    return RunSnapshot(name="r<1>", dir=Path("/nonexistent"), status="running", done=False, tasks=tasks,
                       started_at=100.0, ended_at=ended_at)


def test_the_timeline_is_drawn_without_matplotlib_each_phase_where_the_axes_say():
    """Live and at the end (timeline.png), with Pillow: matplotlib's drawing took 60-150 ms that a first cell's
    end waited for (issue 31)."""
    run = fake_run([[(100.0, "starting"), (102.0, "joining"), (103.0, "training"), (109.0, "failed"),
                     (110.0, "starting"), (112.0, "training")],
                    [(100.0, "starting"), (104.0, "training"), (111.0, "finished")]])
    data = timeline_data(run, now=115.0)
    assert json.loads(json.dumps(data)) == data  # plain data: what a subprocess is given
    done = subprocess.run([sys.executable, "-c", "import json, sys\nfrom kwnb.pictures.timeline import timeline_png\n"
                           "sys.stdout.buffer.write(timeline_png(json.load(sys.stdin)))\n"
                           "assert 'matplotlib' not in sys.modules"], input=json.dumps(data).encode(),
                          capture_output=True, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    live = pixels(io.BytesIO(done.stdout))
    assert np.array_equal(live, pixels(io.BytesIO(timeline_png(data))))
    height, width = live.shape[:2]
    assert (width, height) == (756, round((0.42 * 2 + 1.25) * 90))  # 8.4 in at 90 dpi, a lane's height per task

    def colour_at(image, t, lane):  # the middle of lane `lane` at t seconds, where the axes say
        left, right, top, bottom = 1.45 * 90, 0.98 * width, 0.3 * 90, height - 0.8 * 90
        x = left + t / (15 * 1.02) * (right - left)
        y = top + (lane + 0.5) * (bottom - top) / 2
        return "#%02X%02X%02X" % tuple(image[int(y), int(x)][:3])

    for t, lane, phase in ((1, 0, "starting"), (2.5, 0, "joining"), (6.5, 0, "training"), (11, 0, "starting"),
                           (13.5, 0, "training"), (2.5, 1, "starting"), (8.5, 1, "training")):
        assert colour_at(live, t, lane) == PHASE_COLOURS[phase], (t, lane, phase)
    assert colour_at(live, 9.5, 0) == "#FFFFFF"  # failed, not yet restarted
    assert colour_at(live, 13, 1) == "#FFFFFF"  # worker 1 finished at 11 s


def test_many_tasks_the_shown_tab_is_current_and_the_failed_task_leads_the_overview(tmp_path):
    from kwnb.notebook.dashboard import Dashboard

    run = kwnb.launch(BEHAVE, n=14, name="many", runs_dir=tmp_path / "runs", cwd=tmp_path, network="host",
                      warm=False, args="--sleep 15 --fail-index 9 --code 3", on_failure="keep")
    dashboard = Dashboard(run)
    try:
        deadline = time.monotonic() + 60
        while not (run.workers[9].returncode is not None and "tall" in dashboard.overview.value
                   and "worker 9" in dashboard.overview.value.split("<tbody>")[1][:300]):
            assert time.monotonic() < deadline, dashboard.overview.value
            time.sleep(0.2)
        time.sleep(1)  # a few refreshes
        assert not run.done
        assert dashboard.overview.value.startswith("<div") and "14 tasks: " in dashboard.overview.value
        assert "1 failed" in dashboard.overview.value.split("<table")[0]
        assert "worker 0 started" in dashboard.logs[0].value
        assert [log.value for log in dashboard.logs[1:]] == [""] * 13  # hidden tabs wait
        dashboard.tabs.selected_index = 9
        assert "failing with exit code 3" in dashboard.logs[9].value  # brought up to date when shown
        assert "exit code <b>3</b>" in dashboard.headers[9].value
        while dashboard.timeline.layout.display == "none" and not run.done:
            time.sleep(0.2)
        assert not run.done and bytes(dashboard.timeline.value).startswith(b"\x89PNG")
    finally:
        run.wait(60)
        dashboard._thread.join(30)
    assert all(f"worker {i} started" in log.value for i, log in enumerate(dashboard.logs))  # at the end, every tab
    assert dashboard.timeline.format == "png" and bytes(dashboard.timeline.value).startswith(b"\x89PNG")


def test_the_run_is_done_when_its_tasks_end_and_its_pictures_follow(tmp_path, monkeypatch):
    """wait() returns with the exit codes and summary.txt while the pictures are still being drawn (issue 31:
    they cost a cold launch about 1.3 s); once drawn, summary.txt names them."""
    from kwnb.pictures import outputs

    script = tmp_path / "fit.py"
    script.write_text(FIT)
    release, real = threading.Event(), outputs.draw_elsewhere
    monkeypatch.setattr(outputs, "draw_elsewhere", lambda plan: release.wait(60) and real(plan))
    monkeypatch.setattr(outputs, "draw", lambda plan: release.wait(60) and real(plan))
    monkeypatch.setattr(outputs, "draw_plan", lambda plan, start=False: None)  # no painter (pictures/painter.py)
    run = kwnb.launch(script, n=2, name="fit", runs_dir=tmp_path / "runs", network="host", warm=False)
    try:
        assert run.wait(60) == [0, 0] and run.done, run.summary()
        summary = run.dir / "summary.txt"
        assert "exit codes: 0, 0" in summary.read_text() and "curves:" not in summary.read_text()
        assert not outputs.pictures_ready(run, timeout=0.5), "the pictures were drawn before the run was done"
    finally:
        release.set()
    assert outputs.pictures_ready(run, timeout=60)
    assert run.curves_path == run.dir / "curves.png" and (run.dir / "timeline.png").is_file()
    assert f"curves: {run.dir / 'curves.png'}" in summary.read_text()


def publish_display_data_with(monkeypatch, replacement) -> None:
    """IPython's publish_display_data replaced where display() finds it: IPython.core.display_functions since
    IPython 8, IPython.core.display in 7.34 (Colab's); IPython.display re-exports it."""
    for where in ("IPython.core.display_functions", "IPython.core.display", "IPython.display"):
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        if hasattr(module, "publish_display_data"):
            monkeypatch.setattr(module, "publish_display_data", replacement)


def test_the_first_live_dashboard_of_a_session_says_what_to_look_at_and_no_later_one(tmp_path, monkeypatch):
    from kwnb.notebook import dashboard

    monkeypatch.setattr(dashboard, "_guide_shown", [False])  # a new kernel session
    # Shown without a shell: IPython's display and update_display would make an InteractiveShell singleton,
    # which a later test's TerminalInteractiveShell (test_magics) cannot replace.
    publish_display_data_with(monkeypatch, lambda *args, **kwargs: None)
    script = tmp_path / "sleepy.py"
    script.write_text("import time\ntime.sleep(30)\n")  # still going when shown, on a loaded machine too
    boards = []
    for name in ("first", "second"):
        run = kwnb.launch(script, n=1, name=name, runs_dir=tmp_path / "runs", cwd=tmp_path, network="host")
        boards.append(dashboard.dashboard_for(run))
        boards[-1].show()
    first, second = boards
    assert "What to look at" in first.guide.value and "red banner" in first.guide.value
    assert first.guide.layout.display is None and first.guide in first.widget.children
    assert second.guide.value == "" and second.guide.layout.display == "none"  # once a session
    first.show()  # the same dashboard shown again keeps it
    assert "What to look at" in first.guide.value
    # Not in the static account: a published page has no tabs to point at.
    assert "What to look at" not in first._account_bundle()["text/html"]
    for board in boards:
        board.run.stop()
        board._thread.join(30)
    reopened = dashboard.Dashboard(kwnb.open_run(first.run.dir))  # a past run: nothing starts, nothing to guide
    monkeypatch.setattr(dashboard, "_guide_shown", [False])
    reopened.show()
    assert reopened.guide.value == ""


def test_wait_with_pictures_returns_once_they_are_drawn(tmp_path, monkeypatch):
    """wait() does not wait for the pictures; a script that wants curves.png asks wait(pictures=True)."""
    from kwnb.pictures import outputs

    script = tmp_path / "fit.py"
    script.write_text(FIT)
    real = outputs._draw_where_quickest
    monkeypatch.setattr(outputs, "_draw_where_quickest", lambda plan: time.sleep(1.5) or real(plan))
    run = kwnb.launch(script, n=2, name="fit", runs_dir=tmp_path / "runs", network="host", warm=False)
    assert run.wait(120, pictures=True) == [0, 0]
    assert run.curves_path == run.dir / "curves.png" and (run.dir / "timeline.png").is_file()
    assert f"curves: {run.dir / 'curves.png'}" in (run.dir / "summary.txt").read_text()


def test_what_the_pictures_could_not_draw_is_noted_in_run_json_too(tmp_path, monkeypatch):
    """The notes come after the run's end wrote run.json: it is written again, so `kwnb show` and open_run
    tell what summary.txt tells."""
    from kwnb.pictures import outputs

    script = tmp_path / "fit.py"
    script.write_text(FIT)
    monkeypatch.setattr(outputs, "_draw_where_quickest", lambda plan: time.sleep(0.5) or ["could not save curves: boom"])
    run = kwnb.launch(script, n=2, name="fit", runs_dir=tmp_path / "runs", network="host", warm=False)
    assert run.wait(120) == [0, 0]
    assert outputs.pictures_ready(run, timeout=60)
    assert "could not save curves: boom" in (run.dir / "summary.txt").read_text()
    assert json.loads((run.dir / "run.json").read_text())["result"]["notes"] == ["could not save curves: boom"]
    assert kwnb.open_run(run.dir).notes == ["could not save curves: boom"]


def test_a_summary_said_to_come_below_leaves_the_final_account_sent_once_without_it(tmp_path, monkeypatch):
    """--wait says before the end that its summary comes below: the run's end sends the final account once,
    without the summary (it was sent twice, with and then without: 0.1 s of a first cell, issue 31); a wait
    interrupted takes that back, and the final account then carries the summary."""
    from kwnb.notebook import dashboard

    sent = []
    publish_display_data_with(monkeypatch, lambda data, *a, **k: sent.append(data))  # no shell (the guide's test)
    monkeypatch.setattr(f"IPython.display.display", lambda *a, **k: None)
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    accounts = {}
    for below in (True, False):
        run = kwnb.launch(script, n=1, name=f"below-{below}", runs_dir=tmp_path / "runs", network="host", warm=False)
        board = dashboard.dashboard_for(run)
        board.show()
        dashboard.summary_printed_below(run)
        if not below:
            dashboard.summary_printed_below(run, False)  # the wait was interrupted
        del sent[:]
        assert run.wait(60) == [0], run.summary()
        dashboard.settle(run)
        dashboard.summary_printed_below(run, below)  # as the magic says once the summary is printed (or not)
        accounts[below] = [d["text/html"] for d in sent if board.account_id in d.get("text/html", "")]
    assert len(accounts[True]) == 1 and "exit codes" not in accounts[True][0]
    assert len(accounts[False]) == 1 and "exit codes" in accounts[False][0]
