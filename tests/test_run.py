"""kwnb.launch and Run with real worker processes on localhost.

TensorFlow runs (marked slow) are few and tiny, each shared by several tests through a module
fixture. Failure handling is tested with plain-Python workers (tests/scripts/behave.py), which
start in a fraction of a second. Every run lands in a pytest temporary folder and is stopped.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

import kwnb
from kwnb.engine.live.after_end import AfterEnd
from kwnb.engine.live.compat import FORMER_NAMES
from kwnb.pictures.outputs import pictures_ready
from waiting import wait_until

SCRIPTS = Path(__file__).parent / "scripts"
BEHAVE = SCRIPTS / "behave.py"
EPOCH_LINE = re.compile(r"loss: ([0-9.]+) - accuracy: ([0-9.]+)[^\r\x08\n]*\n")


# ----- helpers ------------------------------------------------------------------------------------

def gone(process: psutil.Process) -> bool:
    """Ended: no such process any more, or only a zombie left for its (new) parent to reap."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def describe(process: psutil.Process) -> str:
    try:
        return f"pid {process.pid} {process.status()} parent {process.ppid()} {' '.join(process.cmdline())}"
    except psutil.Error as error:
        return f"pid {process.pid}: {error!r}"


def log_text(worker) -> str:
    return Path(worker.log_path).read_bytes().decode("utf-8", errors="replace")


def printed_json(worker, tag: str = "KWNB-TEST ") -> dict:
    """The JSON a test script printed on its `KWNB-TEST {...}` line."""
    for line in log_text(worker).splitlines():
        if line.startswith(tag) and line[len(tag):].startswith("{"):
            return json.loads(line[len(tag):])
    raise AssertionError(f"no {tag!r} line in {worker.log_path}")


def epoch_rows_from_log(worker) -> list[dict]:
    """Keras's end-of-epoch lines, read straight from the raw log bytes."""
    return [{"epoch": i, "loss": float(loss), "accuracy": float(acc)}
            for i, (loss, acc) in enumerate(EPOCH_LINE.findall(log_text(worker)))]


def children_of(worker) -> list[int]:
    match = re.search(rf"worker {worker.index} children ([\d ]+)", log_text(worker))
    return [int(pid) for pid in match.group(1).split()] if match else []


def own_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


pytestmark = pytest.mark.usefixtures("stop_leftover_runs")


def launch_behave(tmp_path, name, args, **options):
    options.setdefault("runs_dir", tmp_path / "runs")
    return kwnb.launch(BEHAVE, n=2, name=name, args=args, **options)


# ----- model.fit on two workers -------------------------------------------------------------------

@pytest.fixture(scope="module")
def fit_run(tmp_path_factory):
    """tests/scripts/fit_env.py (verbose=1) on 2 workers, launched from a cwd of its own."""
    work = tmp_path_factory.mktemp("fit-cwd")
    runs_dir = tmp_path_factory.mktemp("fit-runs")
    before = os.getcwd()
    os.chdir(work)
    try:
        run = kwnb.launch(SCRIPTS / "fit_env.py", n=2, name="fit-env", args="1", runs_dir=runs_dir,
                          env={"KWNB_TEST_FLAG": "from-launch"})
    finally:
        os.chdir(before)
    try:
        run.wait(timeout=240)
        assert pictures_ready(run)  # curves.png follows the run's end (issue 31)
        run.launch_cwd = work  # for the tests below
        yield run
    finally:
        run.stop()


@pytest.mark.slow
def test_fit_run_finishes_on_both_workers(fit_run):
    assert fit_run.done
    assert fit_run.exit_codes == [0, 0], fit_run.summary()
    assert fit_run.status == "finished"
    assert fit_run.reason == "" and fit_run.restarts == 0
    assert [(w.task_type, w.index, w.status, w.returncode) for w in fit_run.workers] == [
        ("worker", 0, "finished", 0), ("worker", 1, "finished", 0)]
    pids = [w.pid for w in fit_run.workers]
    assert all(isinstance(pid, int) for pid in pids) and len(set(pids)) == 2
    assert kwnb.get_run("fit-env") is fit_run
    assert fit_run in kwnb.runs()


@pytest.mark.slow
def test_fit_workers_get_distinct_tf_configs_of_one_cluster(fit_run):
    configs = [w.tf_config for w in fit_run.workers]
    assert configs[0]["cluster"] == configs[1]["cluster"]
    cluster = configs[0]["cluster"]
    assert list(cluster) == ["worker"] and len(cluster["worker"]) == 2
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    hosts, ports = zip(*(address.rsplit(":", 1) for address in cluster["worker"]))
    assert set(hosts) == {"localhost"}
    assert len(set(ports)) == 2 and "12345" not in ports
    # ...and that is what each worker process actually saw.
    for worker in fit_run.workers:
        seen = printed_json(worker)
        assert seen["tf_config"] == worker.tf_config
        assert (seen["task_type"], seen["task_index"]) == (worker.task_type, worker.index)


@pytest.mark.slow
def test_fit_history_matches_the_epoch_lines(fit_run):
    for position in (0, 1):
        expected = epoch_rows_from_log(fit_run.workers[position])
        assert [row["epoch"] for row in expected] == [0, 1, 2]
        assert fit_run.history(position) == expected
    assert fit_run.history() == fit_run.history(0)


@pytest.mark.slow
def test_fit_step_history_ends_each_epoch_at_the_epoch_values(fit_run):
    """verbose=1 step rows are summed over the 2 replicas by tf-keras; step_scale brings them back."""
    steps_per_epoch = 5  # tests/scripts/fit_env.py
    for position in (0, 1):
        history, steps = fit_run.history(position), fit_run.step_history(position)
        assert [r["step"] for r in steps] == sorted(r["step"] for r in steps)
        for row in history:
            in_epoch = [r for r in steps if r["epoch"] == row["epoch"]]
            assert in_epoch, f"no step rows for epoch {row['epoch']}"
            last = in_epoch[-1]
            assert last["step"] == (row["epoch"] + 1) * steps_per_epoch
            assert last["loss"] == pytest.approx(row["loss"], abs=1e-3)
            assert last["accuracy"] == pytest.approx(row["accuracy"], abs=1e-3)
        assert all(0 <= r["accuracy"] <= 1 for r in steps)  # unscaled, they run up to 2


@pytest.mark.slow
def test_fit_logs_hold_each_workers_own_output(fit_run):
    for worker in fit_run.workers:
        raw = log_text(worker)
        other = 1 - worker.index
        assert f'"task_index": {worker.index},' in raw
        assert f'"task_index": {other},' not in raw
        assert f"KWNB-TEST done worker {worker.index} " in raw
        assert f"KWNB-TEST done worker {other} " not in raw
        assert "Epoch 3/3" in raw
        shown = fit_run.logs(worker.position)
        assert "\r" not in shown and "\b" not in shown
        assert f"KWNB-TEST done worker {worker.index} keras=tf_keras" in shown
        assert fit_run.logs(worker.position, tail=1) == shown.splitlines()[-1]


@pytest.mark.slow
def test_fit_worker_environment_and_cwd(fit_run):
    for worker in fit_run.workers:
        seen = printed_json(worker)
        assert seen["env"] == {"TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1", "PYTHONUNBUFFERED": "1",
                               "KWNB_TEST_FLAG": "from-launch"}
        assert os.path.realpath(seen["cwd"]) == os.path.realpath(fit_run.launch_cwd)
        assert seen["argv"] == ["1"]
        assert "keras=tf_keras" in log_text(worker)  # TF_USE_LEGACY_KERAS took effect


@pytest.mark.slow
def test_fit_run_folder(fit_run):
    folder = fit_run.dir
    assert folder.parent == Path(fit_run.settings.runs_dir)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for worker in fit_run.workers:
        assert worker.log_path.parent == folder
        assert stat.S_IMODE(worker.log_path.stat().st_mode) == 0o600
    assert (folder / "fit_env.py").read_bytes() == (SCRIPTS / "fit_env.py").read_bytes()
    assert fit_run.curves_path == folder / "curves.png"
    assert (folder / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (folder / "summary.txt").read_text()
    assert summary.strip() == fit_run.summary().strip()
    assert "'fit-env': finished" in summary and "exit codes: 0, 0" in summary
    last = fit_run.history()[-1]
    assert f"3 epochs, last: loss {last['loss']:.4g}" in summary
    assert not (fit_run.launch_cwd / ".kwnb").exists()  # runs_dir was honoured


# ----- a custom training loop ---------------------------------------------------------------------

@pytest.mark.slow
def test_custom_training_loop_history(tmp_path):
    run = kwnb.launch(SCRIPTS / "custom_loop.py", n=2, name="custom-loop", runs_dir=tmp_path)
    try:
        assert run.wait(timeout=240) == [0, 0], run.summary()
        line = re.compile(r"^Epoch: (\d+), accuracy: ([0-9.]+), train_loss: ([0-9.]+)\.$", re.MULTILINE)
        for worker in run.workers:
            printed = line.findall(log_text(worker))
            assert [int(e) for e, _, _ in printed] == [0, 1, 2]
            expected = [{"epoch": int(e), "accuracy": float(a), "train_loss": float(t)} for e, a, t in printed]
            assert run.history(worker.position) == expected
            assert run.step_history(worker.position) == []
        assert "3 epochs, last: accuracy" in run.summary()
    finally:
        run.stop()


# ----- kwnb.report from plain Python --------------------------------------------------------------

@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("report-out")
    run = kwnb.launch(SCRIPTS / "reporter.py", n=2, name="reporter", args=[str(out)],
                      runs_dir=tmp_path_factory.mktemp("report-runs"))
    try:
        run.wait(timeout=60)
        assert pictures_ready(run)
        run.expected = [json.loads((out / f"expected-{i}.json").read_text()) for i in (0, 1)]
        yield run
    finally:
        run.stop()


def without_time(rows):
    return [{k: v for k, v in row.items() if k != "time"} for row in rows]


def test_reported_metrics_show_up_in_history(report_run):
    assert report_run.exit_codes == [0, 0], report_run.summary()
    for position in (0, 1):
        expected = report_run.expected[position]
        assert without_time(report_run.history(position)) == expected["epochs"]  # floats survive JSON exactly
        assert without_time(report_run.step_history(position)) == expected["steps"]
    assert report_run.expected[0] != report_run.expected[1]  # each worker's own rows
    assert report_run.curves_path is not None and report_run.curves_path.is_file()


def test_summary_shows_the_reported_metrics_not_the_report_timestamp(report_run):
    """kwnb.report stamps rows with `time`; the summary's `last:` should list training metrics."""
    last = report_run.expected[0]["epochs"][-1]
    summary = report_run.summary()
    assert f"3 epochs, last: loss {last['loss']:.4g}  accuracy {last['accuracy']:.4g}" in summary, summary


# ----- what a learner's Run shows -----------------------------------------------------------------

LEARNER_NAMES = {
    "task", "tasks", "workers", "worker", "chief", "history", "step_history", "logs",  # its tasks, rows, logs
    "name", "dir", "script", "args", "cwd", "python", "settings", "launcher",  # what was launched, where
    "status", "done", "elapsed", "exit_codes", "started_at", "ended_at", "reason", "notes", "diagnoses",
    "diagnosis_history", "restarts", "user_restarts", "port_retries", "timed_out", "warm", "curves_path",
    "summary", "snapshot",  # how it goes or went
    "start", "wait", "stop", "kill", "restart", "stacks",  # what a learner does
    "wait_ready", "coordinator_tf_config", "cluster_resolver",  # a ParameterServerStrategy coordinator's
}
ENGINE_OWN = ("add_note", "apply_findings", "control_lock", "end_sidecars", "fail", "finish_launcher", "mark_ended",
              "relaunch", "say", "state_lock", "stop_tasks", "stopping")  # what a Run showed before, kwnb's own


def test_a_learners_run_shows_the_learners_names_and_none_of_the_engines(tmp_path):
    """dir() of what kwnb.launch returns: the learner's verbs and values, no method or lock of the engine's
    (its engine side and supervisor are held privately); the names earlier versions showed still work, with a
    DeprecationWarning saying what to use instead, and are not in dir()."""
    run = launch_behave(tmp_path, "learner", ["--sleep", "0"])
    try:
        assert run.wait(timeout=60) == [0, 0], run.summary()
        assert isinstance(run, kwnb.Run) and repr(run).startswith("<kwnb Run 'learner' finished, 2 tasks, "), repr(run)
        shown = set(dir(run))
        assert {name for name in shown if not name.startswith("_")} == LEARNER_NAMES
        assert {name for name in shown if name[:1] == "_" and name[:2] != "__"} == {"_engine", "_supervisor", "_reading_lock"}
        lock = type(threading.RLock())
        assert not [name for name in LEARNER_NAMES if isinstance(getattr(run, name), lock)]
        assert set(ENGINE_OWN) <= set(FORMER_NAMES) and not set(FORMER_NAMES) & shown
        for name in FORMER_NAMES:
            with pytest.warns(DeprecationWarning, match=rf"^Run\.{name} will be removed: \w"):
                getattr(run, name)
        with pytest.warns(DeprecationWarning, match="print what an on_end callback has to tell"):
            run.add_note("said by saved code")
        assert run.notes[-1] == "said by saved code"
        run.notes.append("a learner's own list")  # a copy: the run's notes stay kwnb's
        assert "a learner's own list" not in run.notes
        with pytest.raises(AttributeError, match="read-only"):
            run.status = "finished"
        with pytest.raises(AttributeError, match="cannot be set"):
            run.failure_grace = 1.0
    finally:
        run.stop()


def test_an_on_end_callback_gets_the_run_and_its_work_after_the_end_is_waited_for(tmp_path):
    """The callback gets the learner's Run; an AfterEnd it returns runs in a thread that is not a daemon, adds
    to the run's notes, and wait(pictures=True) waits for it (kwnb.launch's pictures are one)."""
    release, given = threading.Event(), []

    def later(note):
        release.wait(30)
        note("said after the end")

    def callback(run):
        given.append(run)
        return AfterEnd("kwnb-test-after-end", later)

    run = launch_behave(tmp_path, "after-end", ["--sleep", "0"], on_end=[callback])
    try:
        assert run.wait(timeout=60) == [0, 0] and given == [run], run.summary()
        thread = next(t for t in threading.enumerate() if t.name == "kwnb-test-after-end")
        assert not thread.daemon and thread.is_alive()
        assert run.wait(timeout=0.3, pictures=True) == [0, 0] and "said after the end" not in run.notes
        release.set()
        run.wait(timeout=30, pictures=True)
        assert not thread.is_alive() and run.notes[-1] == "said after the end"
    finally:
        release.set()
        run.stop()


# ----- failure policy, timeout, stop (plain Python workers) ---------------------------------------

def test_failure_stops_the_others_after_the_grace_period(tmp_path):
    run = launch_behave(tmp_path, "fail-stop", ["--fail-index", "1", "--code", "3", "--sleep", "60"],
                        failure_grace=1)
    codes = run.wait(timeout=60)
    assert None not in codes, "wait() returned with workers still running"
    assert codes[1] == 3
    assert [w.status for w in run.workers] == ["stopped", "failed"]
    assert run.status == "failed"
    assert "worker 1 failed with exit code 3" in run.reason
    summary = run.summary()
    assert "failed" in summary and "worker 1 failed with exit code 3" in summary
    assert "| worker 1 failing with exit code 3" in summary  # the failed task's last lines
    assert "worker 0 done" not in log_text(run.workers[0])


def test_on_failure_keep_leaves_the_others_running(tmp_path):
    run = launch_behave(tmp_path, "fail-keep", ["--fail-index", "1", "--code", "3", "--sleep", "60"],
                        on_failure="keep", failure_grace=0.2)
    try:
        assert wait_until(lambda: run.workers[1].returncode is not None, timeout=30)
        assert run.wait(timeout=1.5) == [None, 3]  # well past failure_grace: still running
        chief = psutil.Process(run.workers[0].pid)
        assert not gone(chief)
        assert run.workers[0].status == "running" and not run.done
        assert run.status == "running"
    finally:
        codes = run.stop()
    assert codes[0] is not None and codes[1] == 3
    assert run.workers[0].status == "stopped"
    assert gone(chief)
    assert run.status == "failed"


def test_timeout_stops_the_run(tmp_path):
    run = launch_behave(tmp_path, "timeout", ["--sleep", "60"], timeout=2)
    codes = run.wait(timeout=60)
    assert None not in codes
    assert [w.status for w in run.workers] == ["stopped", "stopped"]
    assert run.status == "failed"
    assert run.reason.startswith("timed out")
    assert "timed out" in run.summary()


def test_stop_ends_workers_and_their_children(tmp_path):
    run = launch_behave(tmp_path, "stop-children", ["--sleep", "60", "--child", "group", "--child", "session"])
    try:
        # Wait until the supervisor itself has read the line, i.e. polled the workers since their children exist.
        assert wait_until(lambda: all(any("children" in line for line in w.screen.tail()) for w in run.workers),
                          timeout=30), [log_text(w) for w in run.workers]
        workers = [psutil.Process(w.pid) for w in run.workers]
        children = [psutil.Process(pid) for w in run.workers for pid in children_of(w)]
        assert len(children) == 4
        assert not any(gone(p) for p in workers + children)
    finally:
        codes = run.stop()
    assert None not in codes
    assert run.status == "stopped" and run.reason == "stopped by the user"
    assert [w.status for w in run.workers] == ["stopped", "stopped"]
    assert all(gone(p) for p in workers)
    assert wait_until(lambda: all(gone(p) for p in children), timeout=10), \
        [describe(p) for p in children if not gone(p)]


def test_restart_policy_restarts_the_cluster_once(tmp_path):
    marker = tmp_path / "failed-once"
    started = tmp_path / "started"
    started.mkdir()
    run = launch_behave(tmp_path, "restart", ["--fail-index", "1", "--fail-once", str(marker), "--sleep", "1",
                                              "--peers-started", str(started)], on_failure="restart", max_restarts=1)
    codes = run.wait(timeout=60)
    assert codes == [0, 0], run.summary()
    assert marker.exists()
    assert run.restarts == 1
    assert run.status == "finished"
    assert [w.restarts for w in run.workers] == [1, 1]
    failed, ok = (log_text(run.workers[1]).split("kwnb: restart 1", 1) + [""])[:2]
    assert "worker 1 failing with exit code 3" in failed
    assert "worker 1 second attempt: marker found" in ok and "worker 1 done" in ok
    assert "failing" not in ok
    for worker in run.workers:  # every task was started twice, by two different processes
        pids = re.findall(rf"worker {worker.index} started pid (\d+)", log_text(worker))
        assert len(pids) == 2 and pids[0] != pids[1] and int(pids[1]) == worker.pid
        assert "kwnb: restart 1" in run.logs(worker.position)
    assert "1 restart" in run.summary()


def test_restart_policy_gives_up_after_max_restarts(tmp_path):
    run = launch_behave(tmp_path, "restart-give-up", ["--fail-index", "1", "--sleep", "60"],
                        on_failure="restart", max_restarts=2, failure_grace=0.5)
    codes = run.wait(timeout=60)
    assert None not in codes and codes[1] == 3
    assert run.restarts == 2
    assert run.status == "failed"
    assert log_text(run.workers[1]).count("worker 1 failing with exit code 3") == 3


def test_relaunching_a_name_stops_the_previous_run(tmp_path):
    first = launch_behave(tmp_path, "same-name", ["--sleep", "60"])
    assert wait_until(lambda: all(w.status == "running" for w in first.workers), timeout=120)  # a loaded machine's start
    processes = [psutil.Process(w.pid) for w in first.workers]
    second = launch_behave(tmp_path, "same-name", ["--sleep", "60"])
    try:
        assert first.done
        assert None not in first.exit_codes
        assert all(gone(p) for p in processes)
        assert [w.status for w in first.workers] == ["stopped", "stopped"]
        assert "replaced" in first.reason
        assert any(first.dir.name in note and "previous run" in note for note in second.notes)
        assert second.dir != first.dir
        assert not second.done and kwnb.get_run("same-name") is second
        assert "note: stopped the previous run" in second.summary()
    finally:
        second.stop()


# ----- bad input ----------------------------------------------------------------------------------

def _script(tmp_path, text):
    path = tmp_path / "given.py"
    path.write_text(text)
    return path


BAD_INPUTS = {
    "n=0": (lambda p: (_script(p, "pass\n"), {"n": 0}), "at least 1"),
    "n=-1": (lambda p: (_script(p, "pass\n"), {"n": -1}), "at least 1"),
    "n='abc'": (lambda p: (_script(p, "pass\n"), {"n": "abc"}), "must be an integer"),
    "n=65": (lambda p: (_script(p, "pass\n"), {"n": 65}), "at most 64"),
    "directory": (lambda p: (p, {}), "is a directory"),
    "missing": (lambda p: (p / "no_such_script.py", {}), "no script at"),
    "empty": (lambda p: (_script(p, ""), {}), "empty"),
    "blank": (lambda p: (_script(p, "\n   \n"), {}), "empty"),
    "syntax error": (lambda p: (_script(p, "x = 1\ny = 2\ndef f(:\n    pass\n"), {}), r"given\.py line 3: SyntaxError"),
    "python": (lambda p: (_script(p, "pass\n"), {"python": "/no/such/python"}), "not found: /no/such/python"),
    "on_failure": (lambda p: (_script(p, "pass\n"), {"on_failure": "bogus"}), "on_failure must be one of stop, keep, restart"),
    "timeout": (lambda p: (_script(p, "pass\n"), {"timeout": 0}), "timeout must be positive"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_and_starts_nothing(tmp_path, case):
    make, message = BAD_INPUTS[case]
    script, options = make(tmp_path)
    runs_dir = tmp_path / "runs"
    before_runs, before_children = len(kwnb.runs()), own_children()
    with pytest.raises(ValueError, match=message):
        kwnb.launch(script, name=f"bad-{case}", runs_dir=runs_dir, **options)
    assert not runs_dir.exists()
    assert len(kwnb.runs()) == before_runs
    assert own_children() <= before_children


# ----- the watchdog in _bootstrap.py --------------------------------------------------------------

def test_workers_die_with_a_sigkilled_launcher(tmp_path):
    """A kernel killed with SIGKILL runs no cleanup; its workers must notice and end themselves."""
    driver = subprocess.Popen([sys.executable, str(SCRIPTS / "launch_driver.py"), str(tmp_path / "runs")],
                              stdout=subprocess.PIPE, cwd=tmp_path, start_new_session=True)
    leftovers: list[psutil.Process] = []
    try:
        ready, _, _ = select.select([driver.stdout], [], [], 60)
        assert ready, "the driver did not report its run"
        started = json.loads(driver.stdout.readline())
        workers = [psutil.Process(pid) for pid in started["pids"]]
        leftovers += workers
        logs = [Path(started["dir"]) / f"worker-{i}.log" for i in (0, 1)]
        assert wait_until(lambda: all(p.is_file() and " children " in p.read_text() for p in logs), timeout=30)
        children = [psutil.Process(int(re.search(r"children (\d+)", p.read_text()).group(1))) for p in logs]
        leftovers += children
        assert not any(gone(p) for p in workers + children)

        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
        assert wait_until(lambda: all(gone(p) for p in workers + children), timeout=10), \
            [describe(p) for p in workers + children if not gone(p)]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for process in leftovers:
            if not gone(process):
                process.kill()


def test_wait_ready_waits_for_every_port_and_ps_runs_have_no_chief_task(tmp_path):
    """A coordinator in the notebook must not connect before every task listens."""
    script = tmp_path / "listen.py"
    script.write_text(
        "import json, os, socket, time\n"
        "cfg = json.loads(os.environ['TF_CONFIG'])\n"
        "host, port = cfg['cluster'][cfg['task']['type']][cfg['task']['index']].rsplit(':', 1)\n"
        "print('not listening yet', flush=True)\n"
        "time.sleep(1.0)\n"
        "server = socket.socket(); server.bind((host, int(port))); server.listen()\n"
        "time.sleep(60)\n")
    run = kwnb.launch(script, n=2, ps=1, runs_dir=tmp_path / "runs")
    try:
        assert run.wait_ready(timeout=30) is True
        assert all(w.port_open_at and w.port_open_at - w.started_at >= 0.9 for w in run.workers)
        assert [w.is_chief for w in run.workers] == [False, False, False]
        assert "(chief)" not in run.summary()
    finally:
        run.stop()
    quitter = tmp_path / "quit.py"
    quitter.write_text("print('never listens')\n")
    ended = kwnb.launch(quitter, n=2, runs_dir=tmp_path / "runs")
    assert ended.wait_ready(timeout=30) is False and ended.done
