"""Diagnoses on real 2-worker tf-keras runs (tests/scripts/diagnose_fit.py): one per kind, and none for a clean run.
What kwnb makes of TensorFlow's words (an exception, Keras 3, a known error) is checked on runs replayed from real
captures (tests/replay.py; tests/test_replay_drift.py checks TensorFlow still prints them); a kill, a stall, a stopped
peer and a task's own TF_CONFIG on real ones.

Timeliness is checked against the time kwnb itself saw the event (a diagnosis's `since` against the task's
exit or the start of its wait), never against the wall clock of a busy test machine.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import kwnb
from kwnb.machine.ports import free_ports
from kwnb.engine.diagnoses.stacks import blocked_at, py_spy
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
SCRIPTS = Path(__file__).parent / "scripts"
SCRIPT = SCRIPTS / "diagnose_fit.py"
_SOURCE = SCRIPT.read_text().splitlines()
RAISE_LINE = 1 + next(i for i, line in enumerate(_SOURCE) if "raise ValueError" in line)
SLEEP_LINE = 1 + next(i for i, line in enumerate(_SOURCE) if "time.sleep(3600)" in line)


def launch(tmp_path, mode, *extra, **options):
    options.setdefault("stall_after", 60)
    options.setdefault("name", mode)  # another name for a run beside one of the same mode: a name's new run replaces it
    return kwnb.launch(SCRIPT, n=2, args=" ".join([mode, *extra]), runs_dir=tmp_path / "runs",
                       cwd=tmp_path, **options)


def kinds(run):
    return sorted((d.kind, d.task) for d in run.diagnoses)


def test_a_clean_run_has_no_diagnoses(tmp_path):
    run = launch(tmp_path, "clean")
    assert run.wait(120) == [0, 0], run.summary()
    assert run.diagnoses == [] and run.reason == ""
    assert "diagnoses:" not in run.summary()


def test_an_exception_names_the_task_that_raised_and_its_line(replayed):
    run = replayed["raise"]
    assert ("error", 1) in kinds(run) and ("peer_lost", 1) in kinds(run), run.summary()
    assert not any(d.kind == "error" and d.task == 0 for d in run.diagnoses)  # the chief only failed second
    error = next(d for d in run.diagnoses if d.kind == "error")
    assert "ValueError: bad batch on worker 1" in error.message
    assert f"diagnose_fit.py line {RAISE_LINE}, in on_batch_end" in error.message
    assert any("ValueError" in line for line in error.evidence)
    assert error.since - run.workers[1].ended_at < 5
    assert run.reason.startswith("worker 1 failed with ValueError"), run.reason
    assert run.summary().splitlines()[0].endswith(f"({run.reason})")


def test_tasks_that_fail_at_once_give_the_error_as_the_reason(tmp_path):
    """Every task raises as it starts (a typo a learner makes): they all exit within one poll, before the
    throttled diagnosis pass would run, and the reason said only 'worker 0 failed with exit code 1'."""
    (tmp_path / "typo.py").write_text("print('hi')\nundefined_name + 1\n")
    run = kwnb.launch(tmp_path / "typo.py", n=2, runs_dir=tmp_path / "runs", cwd=tmp_path)
    assert run.wait(60) == [1, 1]
    # Either task may be seen failing first (under load they need not end within one poll).
    assert run.reason.startswith(("worker 0 failed with NameError: name 'undefined_name' is not defined",
                                  "worker 1 failed with NameError: name 'undefined_name' is not defined")), run.reason
    assert "typo.py line 2" in run.reason
    # The traceback as `python typo.py` prints it: from the script's frame, none of kwnb's own.
    log = run.workers[0].log_path.read_text()
    assert 'Traceback (most recent call last):\n  File "' + str(tmp_path / "typo.py") + '", line 2' in log, log
    assert "kwnb/task" not in log


def test_a_kill_from_outside_is_killed_with_its_peak_memory(tmp_path):
    # on_failure="keep": the chief is left to find out by itself (about a second with TF 2.21, longer on a
    # loaded machine) instead of being stopped after the 5 s grace, which could come first here.
    run = launch(tmp_path, "clean", "400", on_failure="keep")
    assert wait_until(lambda: run.workers[1].signals.connected_at and run.workers[1].signals.peak_rss), run.summary()
    time.sleep(1)
    os.kill(run.workers[1].pid, signal.SIGKILL)
    if run.wait(90)[0] is None:
        run.stop()
    assert ("killed", 1) in kinds(run) and ("peer_lost", 1) in kinds(run), run.summary()
    killed = next(d for d in run.diagnoses if d.kind == "killed")
    assert "worker 1 was killed by SIGKILL from outside kwnb; peak memory" in killed.message
    assert killed.since - run.workers[1].ended_at < 5
    assert run.reason.startswith("worker 1 was killed by SIGKILL"), run.reason
    assert not any(d.kind in ("error", "killed") and d.task == 0 for d in run.diagnoses)


def test_what_kwnb_ends_is_not_a_mystery(tmp_path):
    """%kw_kill (Run.kill) and kwnb's own stop are failures or stops, never `killed`."""
    run = launch(tmp_path, "clean", "400")
    assert wait_until(lambda: run.workers[1].signals.connected_at), run.summary()
    # The timed run beside the killed one (they are independent; one after the other took 32 s, 15 of them
    # the timeout), started once the first has joined so that its 15 s are not spent on both imports at once.
    timed = launch(tmp_path, "clean", "4000", timeout=15, name="timed")
    run.kill(1)
    run.wait(120)
    assert not any(d.kind == "killed" for d in run.diagnoses), run.summary()
    timed.wait(120)
    assert timed.status == "failed" and timed.timed_out
    assert not any(d.kind in ("killed", "error") for d in timed.diagnoses), timed.summary()


@pytest.mark.timeout(600)
def test_a_stall_says_where_each_task_is_blocked(tmp_path):
    run = launch(tmp_path, "stall", stall_after=8)
    try:
        # Both joined first, with a deadline of its own: at a load average of 50 both were still importing
        # TensorFlow after 90 s, and the stall's deadline below is for the stall alone.
        assert wait_until(lambda: all(task.signals.connected_at for task in run.workers), 400), run.summary()
        assert wait_until(lambda: any(d.kind == "stalled" for d in run.diagnoses), 90), run.summary()
        first = next(d for d in run.diagnoses if d.kind == "stalled")
        last_output = max(task.signals.progress_at for task in run.workers)
        assert first.since - last_output < 8 + 10
        # The culprit: worker 1's main thread is in the learner's callback; the chief's is in TensorFlow. Under load
        # the first look can come while both are still in the first step (then it names none, and looks again).
        assert wait_until(lambda: any(d.kind == "stalled" and d.task is not None for d in run.diagnoses), 60), \
            run.summary()
        stalled = next(d for d in run.diagnoses if d.kind == "stalled")
        assert stalled.task == 1, stalled.message
        assert stalled.message.startswith(f"worker 1 in diagnose_fit.py line {SLEEP_LINE}, in on_batch_end: it is "
                                          f"blocked in its own code and worker 0 waits for it in a collective")
        stacks = run.stacks()
        assert set(stacks) == {0, 1} and "on_batch_end" in stacks[1] and "Thread 0x" in stacks[1]
        if py_spy():  # optional: native frames where py-spy is installed and may attach
            native = run.stacks(1, native=True)[1]
            assert "py-spy --native:" in native and f"on_batch_end (diagnose_fit.py:{SLEEP_LINE})" in native, native[-1500:]
        assert "===== " not in run.logs(1)  # stacks go to the run folder, not into the log
    finally:
        run.stop()
    assert any(d.kind == "stalled" for d in run.diagnoses)  # still said after the stop


def test_keras3_is_named_as_such(replayed):
    run = replayed["keras3"]  # diagnose_fit.py keras3, with env={"TF_USE_LEGACY_KERAS": "0"}
    assert {kind for kind, _ in kinds(run)} >= {"keras3"}, run.summary()
    assert not any(d.kind == "error" for d in run.diagnoses)
    assert "keras-team/keras#20585" in run.reason


def test_keras3_forced_by_the_runs_env_names_that_variable(replayed):
    """A program that uses tf.keras, run with --env TF_USE_LEGACY_KERAS=0: tf.keras is Keras 3 then, so the
    advice to use tf.keras would send the learner the wrong way (issue 29)."""
    run = replayed["clean-keras3-env"]  # diagnose_fit.py clean, with env={"TF_USE_LEGACY_KERAS": "0"}
    found = [d for d in run.diagnoses if d.kind == "keras3"]
    assert found, run.summary()
    assert "--env TF_USE_LEGACY_KERAS=0 made tf.keras Keras 3" in found[0].message
    assert "instead of `import keras`" not in found[0].message


def test_a_script_that_sets_its_own_tf_config_is_told_so_and_not_relaunched(tmp_path):
    ports = free_ports(2)
    run = launch(tmp_path, "own", f"{ports[0]},{ports[0]}")  # both tasks on one port: the second cannot bind
    run.wait(120)
    found = [d for d in run.diagnoses if d.kind == "tf_config_overridden"]
    assert found and f"localhost:{ports[0]}" in found[0].message, run.summary()
    assert run.port_retries == 0 and not any(d.kind == "port_taken" for d in run.diagnoses)
    recorded = json.loads((run.dir / f"tf-config-{found[0].task}.json").read_text())
    assert json.loads(recorded["tf_config"])["cluster"]["worker"][0] == f"localhost:{ports[0]}"


def test_a_tf_config_set_just_before_the_task_ends_is_still_read(tmp_path):
    """The record of a TF_CONFIG the script set is read once more when the task ends: a task that sets it and fails
    at once ends between two samples (1 s apart) since its exit skips Python's last collection."""
    script = tmp_path / "sets_and_fails.py"
    script.write_text("import os, sys\nos.environ['TF_CONFIG'] = '{\"cluster\": {\"worker\": [\"localhost:1\"]}}'\n"
                      "sys.exit(1)\n")
    run = kwnb.launch(script, n=2, name="sets", runs_dir=tmp_path / "runs", cwd=tmp_path)
    assert run.wait(60) == [1, 1], run.summary()
    assert sorted(d.task for d in run.diagnoses if d.kind == "tf_config_overridden") == [0, 1], run.summary()


def test_a_stopped_peer_is_lost_while_its_process_lives(tmp_path):
    run = launch(tmp_path, "clean", "400")
    assert wait_until(lambda: run.workers[1].signals.connected_at), run.summary()
    time.sleep(1)
    os.kill(run.workers[1].pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: any(d.kind == "peer_lost" for d in run.diagnoses), 60), run.summary()
        lost = next(d for d in run.diagnoses if d.kind == "peer_lost")
        assert lost.task == 1 and "SIGSTOP" in lost.message
    finally:
        os.kill(run.workers[1].pid, signal.SIGCONT)
        run.stop()


def test_blocked_at_reads_faulthandler_dumps():
    dump = ('Thread 0x00007f01 (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
            'Current thread 0x00007f00 (most recent call first):\n'
            '  File "/x/site-packages/tensorflow/python/eager/context.py", line 600 in ensure_initialized\n'
            '  File "/job/main.py", line 17 in on_batch_end\n'
            '  File "/job/main.py", line 30 in <module>\n'
            '  File "/repo/kwnb/task/bootstrap.py", line 60 in main\n'
            '  File "/repo/kwnb/task/bootstrap.py", line 90 in <module>\n')
    assert blocked_at(dump, ("/job/main.py",)) == "main.py line 17, in on_batch_end"
    assert blocked_at(dump) == "context.py line 600, in ensure_initialized"
    assert blocked_at("") is None


def test_the_culprit_is_the_task_whose_main_thread_is_outside_tensorflow():
    from kwnb.engine.diagnoses.training_faults import culprits

    def dump(*innermost):
        frames = "".join(f'  File "{f}", line 1 in f\n' for f in innermost)
        return ('Thread 0x00007f01 (most recent call first):\n  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
                f'Current thread 0x00007f00 (most recent call first):\n{frames}'
                '  File "/repo/kwnb/task/bootstrap.py", line 90 in <module>\n')

    waiting = dump("/venv/site-packages/tensorflow/python/eager/execute.py", "/venv/site-packages/tf_keras/src/engine/training.py",
                   "/job/main.py")
    in_callback = dump("/job/main.py", "/venv/site-packages/tf_keras/src/callbacks.py", "/job/main.py")
    in_a_library = dump("/usr/lib/python3.11/queue.py", "/job/main.py")
    assert culprits({0: waiting, 1: in_callback}) == [1]
    assert culprits({0: waiting, 1: in_a_library}) == [1]
    assert culprits({0: waiting, 1: waiting}) == []
    assert culprits({0: "", 1: waiting}) == []  # no stack: never the culprit
    # TensorFlow's all-reduce waiting in multiprocessing.pool (as a loaded run's worker 1 did, issue 29): the
    # standard library's frames are where it waits, not whose wait it is
    python = "/root/.pyenv/versions/3.11.7/lib/python3.11"
    all_reduce = dump(f"{python}/threading.py", f"{python}/threading.py", f"{python}/multiprocessing/pool.py",
                      f"{python}/multiprocessing/pool.py",
                      "/venv/lib/python3.11/site-packages/tensorflow/python/distribute/cross_device_ops.py",
                      "/venv/lib/python3.11/site-packages/tf_keras/src/engine/training.py", "/job/main.py")
    assert culprits({0: waiting, 1: all_reduce}) == []
    assert culprits({0: all_reduce, 1: in_callback}) == [1]


def test_a_peer_named_by_address_is_the_one_on_that_host_and_port():
    """gRPC gives an IP; TF_CONFIG a name. Under Slurm two tasks share a port on different nodes."""
    from types import SimpleNamespace

    from kwnb.engine.diagnoses.peers import _peers_named
    from kwnb.engine.readers.tf_messages import PeerUnavailable

    def task(position, address, code=None):
        return SimpleNamespace(position=position, address=address, returncode=code, task_type="worker",
                               index=position, signals=SimpleNamespace(stopped=False))

    reporter, same_port_elsewhere, lost = task(0, "localhost:20000"), task(1, "localhost:20001"), task(2, "127.0.0.2:20000", -9)
    report = PeerUnavailable(reason="Connection refused", address="127.0.0.2:20000", lines=("x",))
    assert _peers_named(report, reporter, [reporter, same_port_elsewhere, lost]) == [lost]
    report = PeerUnavailable(reason="Connection refused", address="127.0.0.1:20000", lines=("x",))
    assert _peers_named(report, reporter, [reporter, same_port_elsewhere, lost]) == [lost]  # not itself


@pytest.mark.parametrize("mistake, quoted, fix", [
    ("late_strategy", "Collective ops must be configured at program startup",
     "create MultiWorkerMirroredStrategy first, right after importing TensorFlow"),
    ("estimator", "module 'tensorflow' has no attribute 'estimator'", "TensorFlow 2.16 removed tf.estimator"),
    ("session", "tf.placeholder() is not compatible with eager execution", "This is TensorFlow 1 graph code"),
])
def test_a_known_error_is_explained_with_its_fix(replayed, mistake, quoted, fix):
    """TensorFlow's words say what failed, not what to do: the error diagnosis adds one sentence with the fix."""
    run = replayed[mistake]  # known_errors.py MISTAKE
    errors = [d for d in run.diagnoses if d.kind == "error"]
    assert errors and all(quoted in d.message and fix in d.message for d in errors), run.summary()


@pytest.mark.parametrize("short_type, message, fix", [
    # the migration guide's tf1.estimator (tensorflow.compat.v1 as tf1): its module is named differently
    ("AttributeError", "module 'tensorflow.compat.v1' has no attribute 'estimator'", "TensorFlow 2.16 removed"),
    # Kubeflow's older TFJob examples (tests/corpus): TensorFlow 1 names removed in TensorFlow 2
    ("AttributeError", "module 'tensorflow._api.v2.train' has no attribute 'GradientDescentOptimizer'",
     "This is TensorFlow 1 code"),
    ("ModuleNotFoundError", "No module named 'tensorflow.examples'", "This is TensorFlow 1 code"),
    ("AttributeError", "module 'tensorflow' has no attribute 'app'", "This is TensorFlow 1 code"),
    ("AttributeError", "module 'numpy' has no attribute 'app'", ""),  # not TensorFlow's: no fix to give
])
def test_a_removed_tensorflow_api_is_explained_whatever_module_names_it(short_type, message, fix):
    from kwnb.engine.diagnoses.known_errors import explain

    said = explain(short_type, message)
    assert said.startswith(fix) if fix else said == "", said
