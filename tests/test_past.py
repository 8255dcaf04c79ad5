"""Past runs read back from their folders (engine/records/past.py), the snapshot views render from
(engine/records/snapshot.py), and the dashboard drawn from it while the supervisor is stuck.

Plain-Python workers (tests/scripts/behave.py, report_epochs.py): the folder format and the
readers are what is tested; a real TensorFlow run reopened after a kernel restart is in
tests/test_kernel.py.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

import kwnb
from kwnb.engine.live.run import engine_of
from kwnb.engine.records.past import UnreadableRun, list_runs
from kwnb.engine.records.snapshot import RunSnapshot
from kwnb.pictures.outputs import pictures_ready

SCRIPTS = Path(__file__).parent / "scripts"
HISTORY_NAME = "history.json"


BROKEN = """\
import json, os, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index} started", flush=True)
if index == 1:
    raise RuntimeError("the data went missing")
time.sleep(30)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs: one clean (reported epochs), one where worker 1 fails (diagnoses, a reason)."""
    base = tmp_path_factory.mktemp("past")
    clean = kwnb.launch(SCRIPTS / "report_epochs.py", n=2, name="clean", runs_dir=base / "runs", cwd=base)
    (base / "broken.py").write_text(BROKEN)
    failed = kwnb.launch(base / "broken.py", n=2, name="broken", runs_dir=base / "runs", cwd=base, failure_grace=0.5,
                         stop_grace=1.0)
    assert clean.wait(60) == [0, 0], clean.summary()
    failed.wait(60)
    assert failed.done and failed.exit_codes[1] == 1, failed.summary()
    assert pictures_ready(clean) and pictures_ready(failed)  # they follow the runs' ends (issue 31)
    return base / "runs", clean, failed


def wait_for(predicate, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def copy_of(run, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run.dir, tmp_path / run.dir.name))


def test_a_past_run_shows_what_the_live_one_showed(runs):
    runs_dir, clean, failed = runs
    for live in (clean, failed):
        past = kwnb.open_run(live.name, runs_dir=runs_dir)
        assert past.dir == live.dir and past.done and past.missing == []
        assert past.status == live.status and past.exit_codes == live.exit_codes
        assert past.history() == live.history() and past.step_history(1) == live.step_history(1)
        assert [(d.kind, d.task, d.message) for d in past.diagnoses] == \
               [(d.kind, d.task, d.message) for d in live.diagnoses]
        assert [(d.kind, d.task) for d in past.diagnosis_history] == [(d.kind, d.task) for d in live.diagnosis_history]
        assert past.reason == live.reason and past.logs(1) == live.logs(1)
        assert repr(past.task(1)) == f"<TaskView worker 1 pid={live.task(1).pid} {live.task(1).status} " \
                                    f"exit {live.task(1).returncode}>"
        assert [t.phases for t in past.snapshot().tasks] == [t.phases for t in live.snapshot().tasks]
        # The same renderer, two sources: only the elapsed-time rounding could differ, and it does not.
        assert past.summary() == live.summary()
    assert kwnb.open_run(failed.dir).diagnoses and "error" in {d.kind for d in failed.diagnoses}
    assert failed.status == "failed" and kwnb.open_run(failed.dir).reason


def test_what_run_json_keeps_is_declared_once_and_comes_back(runs):
    """The fields tagged `kept` where RunSnapshot, TaskView and Diagnosis declare them are run.json's result
    (and history.json's rows), field for field, and every task field kept reopens as the live run had it (a
    field tagged there is written and read, with no list to update)."""
    from kwnb.engine.diagnoses.diagnosis import Diagnosis
    from kwnb.engine.records.snapshot import RunSnapshot, TaskView
    from kwnb.task.runfolder import HISTORY, kept_fields

    def names(kind, into="run.json"):
        return [f.name for f in kept_fields(kind, into)]

    _, _, failed = runs
    result = json.loads((failed.dir / "run.json").read_text())["result"]
    assert list(result) == names(RunSnapshot)
    assert list(result["tasks"][0]) == [name for f in names(TaskView) for name in (["type", "index"] if f == "id" else [f])]
    assert list(result["diagnoses"][0]) == names(Diagnosis)
    rows = json.loads((failed.dir / HISTORY).read_text())["tasks"]
    assert list(rows[0]) == names(TaskView, HISTORY) == ["tail", "tail_runtime", "epochs", "steps", "steps_per_epoch"]
    live, past = failed.snapshot(), kwnb.open_run(failed.dir).snapshot()
    for name in names(TaskView) + names(TaskView, HISTORY):
        assert [getattr(t, name) for t in past.tasks] == [getattr(t, name) for t in live.tasks], name
    for name in names(RunSnapshot):
        if name != "tasks":
            assert getattr(past, name) == getattr(live, name), name
    assert [vars(d) for d in past.diagnosis_history] == [vars(d) for d in live.diagnosis_history]


def test_a_result_as_an_earlier_kwnb_wrote_it_reads_back(tmp_path):
    """run.json format 2 exactly as the kwnb before the `kept` tags wrote it (its own key order, a field added
    since missing: gpu), with no history.json: it reopens, and what it kept comes back."""
    folder = tmp_path / "earlier-20250101-120000"
    folder.mkdir()
    task = {"position": 0, "type": "worker", "index": 0, "is_chief": True, "status": "failed", "phase": "ended",
            "returncode": 1, "pid": 41, "where": "pid 41", "address": "localhost:2222", "started_at": 100.0,
            "ended_at": 110.0, "elapsed": 10.0, "restarts": 0, "warm": False, "phases": [[100.0, "starting"]],
            "runtime_lines": 0, "total_lines": 0, "progress": [0.5, "epoch 1/2"], "peak_rss": 2048, "rate": None,
            "time_in": {"starting": 10.0}}
    diagnosis = {"kind": "error", "task": 0, "message": "worker 0 failed with ValueError", "since": 109.0,
                 "evidence": ["ValueError"], "cause": "worker 0 failed with ValueError", "attempt": 0, "recovered": False}
    (folder / "run.json").write_text(json.dumps({
        "format": 2, "name": "earlier", "script": "main.py", "args": [], "tasks": [{"type": "worker", "index": 0}],
        "env": {}, "files": [], "python": "python3", "cwd": "/x", "backend": "local", "gpus": False,
        "created": "2025-01-01T12:00:00+0000",
        "result": {"status": "failed", "started_at": 100.0, "ended_at": 110.0, "elapsed": 10.0, "restarts": 0,
                   "user_restarts": 0, "reason": "worker 0 failed", "notes": [], "diagnoses": [diagnosis],
                   "diagnosis_history": [diagnosis], "tasks": [task]}}))
    past = kwnb.open_run(folder).snapshot()
    (shown,) = past.tasks
    assert (past.status, past.reason, past.elapsed) == ("failed", "worker 0 failed", 10.0)
    assert (shown.id.type, shown.id.index, shown.returncode, shown.peak_rss, shown.gpu) == ("worker", 0, 1, 2048, "")
    assert shown.phases == ((100.0, "starting"),) and shown.progress == (0.5, "epoch 1/2")
    assert [vars(d) for d in past.diagnoses] == [{**diagnosis, "follows": "", "ended": {}}]  # (added since: defaults)
    assert any(note.startswith("history.json") for note in past.missing), past.missing


def test_runs_are_listed_newest_first(runs):
    runs_dir, clean, failed = runs
    listed = list_runs(runs_dir)
    assert [r.name for r in listed] == ["broken", "clean"] or [r.name for r in listed] == ["clean", "broken"]
    assert listed == sorted(listed, key=lambda r: r.started, reverse=True)
    by_name = {r.name: r for r in listed}
    assert by_name["broken"].status == "failed" and by_name["clean"].status == "finished"
    assert by_name["clean"].tasks == 2 and 0 < by_name["clean"].duration < 60
    # The newest of a name is the folder %kw_show NAME opens (the last launched), whatever its result says.
    stale = Path(shutil.copytree(clean.dir, runs_dir / "clean-20200101-000000"))
    data = json.loads((stale / "run.json").read_text())
    data["result"]["started_at"] += 3600
    (stale / "run.json").write_text(json.dumps(data))
    try:
        (listed_clean,) = [r for r in list_runs(runs_dir) if r.name == "clean"]
        assert listed_clean.folder == kwnb.open_run("clean", runs_dir=runs_dir).dir == clean.dir
    finally:
        shutil.rmtree(stale)


def test_damaged_folders_get_one_clear_line(runs, tmp_path):
    _, clean, _ = runs
    truncated = copy_of(clean, tmp_path / "truncated")
    (truncated / "run.json").write_text((truncated / "run.json").read_text()[:200])
    newer = copy_of(clean, tmp_path / "newer")
    data = json.loads((newer / "run.json").read_text())
    (newer / "run.json").write_text(json.dumps({**data, "format": 99}))
    gone = copy_of(clean, tmp_path / "gone")
    (gone / "run.json").unlink()
    odd = copy_of(clean, tmp_path / "odd")
    (odd / "run.json").write_text(json.dumps({**data, "result": {"status": "finished", "tasks": "nonsense"}}))
    odd_format = copy_of(clean, tmp_path / "odd_format")
    (odd_format / "run.json").write_text(json.dumps({**data, "format": "2"}))
    expected = {truncated: "cut short or not JSON", newer: "newer kwnb (run.json format 99",
                gone: "cannot be reopened or exported", odd: "'result' is not what kwnb writes",
                odd_format: "format is '2', not a number kwnb writes"}
    for folder, words in expected.items():
        with pytest.raises(UnreadableRun) as caught:
            kwnb.open_run(folder)
        message = str(caught.value)
        assert words in message and "\n" not in message, message
        if folder is not odd:  # %kw_runs (which reads no 'result' beyond the status) says the same
            (listed,) = list_runs(folder.parent)
            assert listed.problem and listed.problem.split(" (")[0] in message, (listed.problem, message)
    with pytest.raises(UnreadableRun, match="no run named 'nothing'"):
        kwnb.open_run("nothing", runs_dir=tmp_path)


def test_older_or_partial_folders_are_read_saying_what_is_missing(runs, tmp_path):
    _, clean, _ = runs
    older = copy_of(clean, tmp_path / "older")  # as kwnb wrote it before run.json had a result
    data = json.loads((older / "run.json").read_text())
    del data["format"], data["result"]
    (older / "run.json").write_text(json.dumps(data))
    (older / "history.json").unlink()
    past = kwnb.open_run(older)
    assert past.status == "unknown" and past.exit_codes == [None, None]
    assert any("an older kwnb wrote this folder" in m for m in past.missing)
    assert any("history.json" in m for m in past.missing)
    assert past.history() == clean.history()  # read again from the logs and kwnb.report() rows
    assert "exit codes: unknown, unknown" in past.summary() and "not recorded: " in past.summary()
    assert past.summary().startswith("kwnb run 'clean': unknown, 2 tasks")  # not "after 0.0 s"
    os.utime(older, (0, 0))  # listed at its run.json's "created", not at the folder's last change
    (listed,) = list_runs(older.parent)
    assert listed.status == "unknown" and abs(listed.started - clean.started_at) < 60
    from kwnb.notebook.dashboard import Dashboard

    shown = Dashboard(past)
    assert "not recorded: how the run ended" in shown.banner.value and "UNKNOWN" in shown.title.value
    assert "not recorded: how the run ended" in shown._account_bundle()["text/html"]

    cut_off = copy_of(clean, tmp_path / "cut_off")  # this kwnb's folder, but the kernel died before the run ended
    data = json.loads((cut_off / "run.json").read_text())
    del data["result"]
    (cut_off / "run.json").write_text(json.dumps(data))
    past = kwnb.open_run(cut_off)
    assert past.status == "unknown" and any("still going elsewhere, or what ran it ended" in m for m in past.missing)
    assert past.history() == clean.history() and not any(HISTORY_NAME in m for m in past.missing)

    deleted = copy_of(clean, tmp_path / "deleted")
    (deleted / "worker-1.log").unlink()
    past = kwnb.open_run(deleted)
    assert past.exit_codes == [0, 0] and any("worker-1.log" in m for m in past.missing)
    assert past.snapshot().tasks[1].tail == () and past.logs(0) == clean.logs(0)


RUNTIME_LINE = "I0000 00:00:1795460621.508971  7334 port.cc:153] written after the run"


def test_a_past_run_shows_the_tail_its_run_recorded_and_an_older_folder_reads_its_log(runs, tmp_path):
    """history.json keeps each task's last lines and which are runtime lines: the log is not read again, unless
    an older kwnb wrote the folder, when the same reader reads it."""
    _, clean, _ = runs
    lines_of = lambda tasks: [(t.tail, t.tail_runtime, t.total_lines, t.runtime_lines) for t in tasks]
    live = clean.snapshot().tasks
    recorded = copy_of(clean, tmp_path / "recorded")
    with open(recorded / "worker-0.log", "a") as log:
        log.write(RUNTIME_LINE + "\n")
    assert lines_of(kwnb.open_run(recorded).snapshot().tasks) == lines_of(live)

    older = copy_of(clean, tmp_path / "older_tail")
    history = json.loads((older / HISTORY_NAME).read_text())
    for task in history["tasks"]:
        del task["tail"], task["tail_runtime"]
    (older / HISTORY_NAME).write_text(json.dumps(history))
    with open(older / "worker-0.log", "a") as log:
        log.write(RUNTIME_LINE + "\n")
    chief, worker = kwnb.open_run(older).snapshot().tasks
    assert lines_of([worker]) == lines_of(live[1:])
    assert chief.tail == (*live[0].tail, RUNTIME_LINE)[-len(chief.tail):] and chief.tail_runtime[-1:] == (len(chief.tail) - 1,)
    assert (chief.total_lines, chief.runtime_lines) == (live[0].total_lines + 1, live[0].runtime_lines + 1)


def test_the_fold_toggle_never_says_hidden_while_the_log_shows_runtime_lines(runs, tmp_path):
    """The toggle's words and the log are two widgets, drawn one after the other: a page read between the
    two (a loaded machine, tests/test_jupyterlab_ui.py) saw "hidden - show" above the runtime lines."""
    from kwnb.notebook.dashboard import Dashboard

    _, clean, _ = runs
    recorded = copy_of(clean, tmp_path / "recorded")
    with open(recorded / "worker-0.log", "a") as log:
        log.write(RUNTIME_LINE + "\n")
    history = json.loads((recorded / HISTORY_NAME).read_text())
    for task in history["tasks"]:  # as an older kwnb wrote it: the log is read again, the runtime line with it
        del task["tail"], task["tail_runtime"]
    (recorded / HISTORY_NAME).write_text(json.dumps(history))
    shown = Dashboard(kwnb.open_run(recorded))
    fold, log = shown.folds[0], shown.logs[0]
    seen = []  # (toggle words, runtime line in the log) at every change of either
    for widget, name in ((fold, "description"), (log, "value")):
        widget.observe(lambda _: seen.append((fold.description, "I0000" in log.value)), names=name)
    fold.value = True
    fold.value = False
    assert seen[-1] == (fold.description, False) and fold.description.endswith("hidden - show")
    assert any(words.endswith("shown - hide") and runtime for words, runtime in seen), seen
    assert not [words for words, runtime in seen if words.endswith("hidden - show") and runtime], seen


def test_the_static_account_is_final_small_and_says_what_it_is(runs):
    """What a published page shows in the dashboard's place: the end of the run in palette PNGs, the
    summary folded with no blank line (Markdown would end the HTML block there), no session memory
    line; a run still going says so and where its end is kept."""
    import dataclasses
    import io

    from PIL import Image

    from kwnb.notebook.static import compact_png, static_html

    _, clean, _ = runs
    ended = dataclasses.replace(kwnb.open_run(clean.dir).snapshot(), past=False, notes=("first\n\nsecond",))
    curves, timeline = ended.curves_path.read_bytes(), ended.timeline_path.read_bytes()
    page = static_html(ended, curves, timeline)
    assert "<summary>summary (exit codes 0, 0)</summary>" in page and "first\n&#160;\nsecond" in page
    assert "\n\n" not in page and "kwnb-overview-memory" not in page and "Still going" not in page
    shown = [base64.b64decode(chunk.split('"')[0]) for chunk in page.split("base64,")[1:]]
    assert [Image.open(io.BytesIO(png)).mode for png in shown] == ["P", "P"]
    assert [len(png) for png in shown] < [len(curves), len(timeline)] and len(shown[0]) < len(curves) // 2
    going = static_html(dataclasses.replace(ended, done=False, status="running"))
    assert "Still going when this was drawn" in going and "%kw_wait clean" in going and "%kw_show clean" in going
    assert "<details" not in going and "kwnb-overview-memory" in going  # while it goes, the session's memory
    clear = io.BytesIO()
    Image.new("RGBA", (40, 20), (0, 0, 0, 0)).save(clear, "PNG")
    assert compact_png(clear.getvalue()) == clear.getvalue() and compact_png(b"not a png") == b"not a png"


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    return shell


def test_magics_list_and_show_past_runs(runs, ip, tmp_path, monkeypatch, capsys):
    runs_dir, clean, failed = runs
    monkeypatch.setenv("KWNB_RUNS_DIR", str(runs_dir))
    broken = Path(shutil.copytree(clean.dir, runs_dir / "clean-20200101-000000"))
    (broken / "run.json").write_text("{")
    try:
        ip.run_line_magic("kw_runs", "")
        listing = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in listing if "unreadable" not in line] in (["broken", "clean"],
                                                                                      ["clean", "broken"])
        (bad,) = [line for line in listing if "unreadable" in line]
        assert bad.startswith("clean-20200101-000000") and "cut short or not JSON" in bad
        ip.run_line_magic("kw_runs", "--all")
        assert len(capsys.readouterr().out.splitlines()) == 3
        with pytest.raises(UsageError, match="not a kwnb run folder|no run named"):
            ip.run_line_magic("kw_show", str(tmp_path / "nowhere"))
        yesterday = Path(shutil.copytree(clean.dir, runs_dir / "yesterday-20200101-000000"))
        data = json.loads((yesterday / "run.json").read_text())
        (yesterday / "run.json").write_text(json.dumps({**data, "name": "yesterday"}))
        with pytest.raises(UsageError, match=r"no run named 'yesterday' .*kwnb.open_run\('yesterday'\) or %kw_show yesterday"):
            ip.run_line_magic("kw_wait", "yesterday")  # after a kernel restart: not live, but on disk
        shutil.rmtree(yesterday)
        older = copy_of(clean, tmp_path)
        data = json.loads((older / "run.json").read_text())
        del data["result"]
        (older / "run.json").write_text(json.dumps(data))
        capsys.readouterr()
        ip.run_line_magic("kw_show", str(older))  # shown once: in the dashboard (here its text), not printed again
        shown = capsys.readouterr().out
        assert shown.count("not recorded: how the run ended") == 1, shown
    finally:
        shutil.rmtree(broken)
    from kwnb.notebook.dashboard import Dashboard, _dashboards

    monkeypatch.chdir(clean.dir.parent)
    ip.run_line_magic("kw_show", f"{clean.dir.name}/")  # a run of this kernel, by its folder: its live dashboard
    assert clean in _dashboards and "still going elsewhere" not in capsys.readouterr().out
    past = kwnb.open_run(clean.dir)
    shown = Dashboard(past)
    bundle, account = shown._bundle(), shown._account_bundle()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["text/plain"] == past.summary() and "exit codes: 0, 0" in bundle["text/plain"]
    assert account["text/html"].count("data:image/png;base64,") == 2  # the curves the run saved and the timeline
    assert "kwnb-overview" in account["text/html"] and "FINISHED" in account["text/html"]
    failed_account = Dashboard(kwnb.open_run(failed.dir))._account_bundle()
    assert "FAILED" in failed_account["text/html"] and "&#9888; <b>error</b>" in failed_account["text/html"]


def test_kw_runs_shows_a_run_of_this_kernel_as_it_goes(ip, tmp_path, monkeypatch, capsys):
    """Its folder has no result until it ends ('unknown'); the kernel that runs it knows it is running."""
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    going = kwnb.launch(SCRIPTS / "behave.py", n=2, name="going", runs_dir=tmp_path / "runs", cwd=tmp_path,
                        args="--sleep 30", warm=False)
    try:
        assert wait_for(lambda: going.status == "running")
        ip.run_line_magic("kw_runs", "")
        (listed,) = capsys.readouterr().out.splitlines()
        assert listed.startswith("going ") and " running " in listed, listed
    finally:
        going.stop()
    ip.run_line_magic("kw_runs", "")
    assert " stopped " in capsys.readouterr().out  # ended: as its folder now says


def test_the_dashboard_renders_while_the_supervisor_is_stuck_in_a_poll(tmp_path, monkeypatch):
    """A poll that blocks (a scheduler that does not answer) holds the supervisor, not the views: the
    dashboard draws every tab from a snapshot, and never while holding the run's state lock."""
    from kwnb.notebook import dashboard as views

    run = kwnb.launch(SCRIPTS / "behave.py", n=2, name="stuck", args="--sleep 30", runs_dir=tmp_path / "runs",
                      cwd=tmp_path)
    stuck, release = threading.Event(), threading.Event()
    process = run.workers[1]._process
    real_poll = process.poll

    def slow_poll():
        stuck.set()
        release.wait(60)
        return real_poll()

    locked_while_rendering = []
    real_overview = views.overview_html

    def overview_html(snapshot, diagnoses, *args):
        locked_while_rendering.append(engine_of(run).state_lock._is_owned())
        return real_overview(snapshot, diagnoses, *args)

    monkeypatch.setattr(views, "overview_html", overview_html)
    try:
        # Both tasks' first lines read before the poll sticks: worker 0 may start after worker 1 (a warm one first).
        assert wait_for(lambda: all(f"worker {i} started" in "\n".join(run.snapshot().tasks[i].tail) for i in (0, 1)))
        process.poll = slow_poll
        assert stuck.wait(30), "the supervisor never polled"
        dashboard = views.Dashboard(run)
        drawn = threading.Thread(target=dashboard.refresh, kwargs={"force_curves": True})
        drawn.start()
        drawn.join(10)
        assert not drawn.is_alive(), "the dashboard waited for the stuck supervisor"
        assert isinstance(dashboard._snapshot, RunSnapshot) and "RUNNING" in dashboard.overview.value
        assert locked_while_rendering and not any(locked_while_rendering)
        assert "worker 0 started" in dashboard.logs[0].value  # the tab on show; a hidden one when shown:
        dashboard.tabs.selected_index = 1
        assert "worker 1 started" in dashboard.logs[1].value
    finally:
        process.poll = real_poll
        release.set()
        run.stop()
    assert run.done


READERS = ["engine/records/snapshot.py", "engine/records/past.py", "engine/records/record.py", "engine/records/summary.py", "pictures/timeline.py", "pictures/plotting.py",
           "pictures/outputs.py", "notebook/dashboard.py", "notebook/overview.py", "notebook/static.py", "notebook/runs_magic.py"]


def test_readers_import_nothing_from_run_py():
    """Views render a snapshot: none of them imports engine/live/run.py, not even for type hints."""
    import ast

    package = Path(kwnb.__file__).parent
    offenders = []
    for name in READERS:
        for node in ast.walk(ast.parse((package / name).read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{alias.name}" for alias in node.names]
                if any(n.split(".")[-2:] in (["engine", "run"], ["live", "run"]) or n in ("run", ".run") or
                       (node.level and n.lstrip(".") == "run") for n in names):
                    offenders.append(f"{name}: from {'.' * node.level}{node.module or ''} import ...")
            elif isinstance(node, ast.Import) and any(alias.name.endswith("engine.run") for alias in node.names):
                offenders.append(f"{name}: import {node.names[0].name}")
    assert not offenders, offenders


def test_the_snapshot_is_a_value_that_imports_no_renderer():
    """Renderers import the snapshot, never the other way round (not even lazily or for type hints):
    text is format_summary(snapshot)'s, as HTML is overview_html(snapshot)'s."""
    import ast

    source = (Path(kwnb.__file__).parent / "engine/records/snapshot.py").read_text()
    imported = [f"{'.' * node.level}{node.module or ''}" for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.ImportFrom)]
    renderers = ("summary", "overview", "static", "dashboard", "pictures", "notebook")
    assert not [name for name in imported if any(word in name for word in renderers)], imported
    assert not hasattr(RunSnapshot, "summary")


def test_terminal_lists_and_shows_past_runs(runs, tmp_path):
    import os
    import subprocess
    import sys

    runs_dir, clean, _ = runs
    truncated = copy_of(clean, tmp_path)
    (truncated / "run.json").write_text("{\"name\": \"clean\", \"tas")
    env = {**os.environ, "KWNB_RUNS_DIR": str(runs_dir)}

    def kwnb_cli(*args):
        return subprocess.run([sys.executable, "-m", "kwnb", *args], capture_output=True, text=True, env=env, timeout=60)

    listed = kwnb_cli("runs")
    env["KWNB_RUNS_DIR"] = str(tmp_path / "none")
    nothing = kwnb_cli("runs")
    assert nothing.returncode == 0 and nothing.stdout == "" and f"no run folder in {tmp_path / 'none'}" in nothing.stderr
    env["KWNB_RUNS_DIR"] = str(runs_dir)
    assert listed.returncode == 0 and sorted(line.split()[0] for line in listed.stdout.splitlines()) == ["broken", "clean"]
    shown = kwnb_cli("show", "clean")
    assert shown.returncode == 0 and shown.stdout.strip() == clean.summary()
    broken = kwnb_cli("show", str(truncated))
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and "cut short or not JSON" in broken.stderr, broken.stderr
    # A reader that stops reading (`kwnb show clean | head -1`): no BrokenPipe traceback, the shell's 141.
    closed = subprocess.Popen([sys.executable, "-m", "kwnb", "show", "clean"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    closed.stdout.close()
    assert closed.wait(60) == 141 and closed.stderr.read() == b""
