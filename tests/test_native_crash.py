"""A task that faults in compiled code (SIGSEGV, SIGABRT, ...) is told as its own crash, with where its Python stood,
never as "killed ... from outside kwnb": faulthandler's dump in its log is read (engine/readers/fault_dump.py) and
`native_crash` says it (engine/diagnoses/crashes.py)."""
from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest

import kwnb
from kwnb.engine.diagnoses.diagnosis import ended
from kwnb.engine.readers.tf_messages import TfLogScanner, scan
from kwnb.engine.tasks.view import TaskView

CAPTURE = Path(__file__).parent / "data" / "crashes" / "keras3-mirrored-segfault.log"


def test_the_dump_of_a_real_fault_is_read_with_the_scripts_line_and_the_innermost_frame():
    text = CAPTURE.read_text()
    crashes = [e for e in scan(text, ["keras3_fit.py"]) if e.kind == "native_crash"]
    assert len(crashes) == 1
    crash = crashes[0]
    assert crash.error == "Segmentation fault"
    assert str(crash.user_frame) == "keras3_fit.py line 58, in <module>"
    assert str(crash.innermost) == "epoch_iterator.py line 99, in reset"  # the main thread's, not the watcher's
    assert crash.lines[0] == "Fatal Python error: Segmentation fault"  # the bar it followed is not evidence
    assert not any(line.startswith("Extension modules") for line in crash.lines)
    # The same log in pieces cut anywhere, as a task's output arrives: the same event.
    scanner, events, rng, at = TfLogScanner(["keras3_fit.py"]), [], random.Random(7), 0
    while at < len(text):
        step = rng.randint(1, 400)
        events += scanner.feed(text[at:at + step])
        at += step
    events += scanner.close()
    assert [e for e in events if e.kind == "native_crash"] == [crash]


def test_a_dump_at_the_very_end_of_a_log_is_read_when_the_task_exits():
    log = 'Fatal Python error: Aborted\n\nCurrent thread 0x01 (most recent call first):\n' \
          '  File "/run/main.py", line 3 in <module>\n'
    crash = [e for e in scan(log, ["main.py"]) if e.kind == "native_crash"]
    assert [(c.error, str(c.user_frame), str(c.innermost)) for c in crash] == \
        [("Aborted", "main.py line 3, in <module>", "main.py line 3, in <module>")]


def test_the_keras3_fault_is_told_with_the_scripts_line_and_keras_frame_never_as_a_kill():
    from kwnb.engine.diagnoses import diagnose
    from kwnb.engine.diagnoses.diagnosis import RunView
    from kwnb.engine.tasks.status import Status
    from kwnb.engine.tasks.task import Signals
    from kwnb.task.tf_config import TaskId

    signals = Signals()
    signals.record(scan(CAPTURE.read_text(), ["keras3_fit.py"]), 5.0)
    tasks = (TaskView(0, TaskId("worker", 0), True, Status.RUNNING, "training", alive=True),
             TaskView(1, TaskId("worker", 1), False, Status.FAILED, "failed", returncode=-11, signals=signals,
                      peak_rss=917 << 20))
    view = RunView(tasks=tasks, name="k3", script="keras3_fit.py", diagnoses=(), stall_after=0)
    found = diagnose.findings(view, 10.0)
    assert [(d.kind, d.task) for d in found] == [("native_crash", 1)]
    assert found[0].message.startswith(
        "worker 1 crashed with SIGSEGV (a segmentation fault) at keras3_fit.py line 58, in <module> (its innermost "
        "Python frame: epoch_iterator.py line 99, in reset); peak memory 917 MiB: the fault is in a compiled library")
    assert diagnose.origin(found, list(tasks)) is found[0]  # the run's reason
    assert "Fatal Python error: Segmentation fault" in found[0].evidence


def test_a_fault_ends_a_task_in_words_of_a_crash_and_a_kill_stays_a_kill():
    def task(code):
        return TaskView(1, ("worker", 1), False, "failed", "training", returncode=code)

    assert ended(task(-11)) == "crashed with SIGSEGV"
    assert ended(task(-6)) == "crashed with SIGABRT"
    assert ended(task(-9)) == "was killed by SIGKILL"


CRASHING = textwrap.dedent("""\
    import ctypes, json, os, sys

    def load_data():
        if sys.argv[1] == "segfault":
            ctypes.string_at(0)  # reads address 0 in C: SIGSEGV
        os.abort()  # SIGABRT, as a failed check in a compiled library raises it

    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
        print("loading", flush=True)
        load_data()
    print("done")
    """)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, signal_name, said, where", [
    ("segfault", "SIGSEGV", "a segmentation fault", "crash.py line 5, in load_data (its innermost Python frame: "
                                                    "__init__.py line"),
    ("abort", "SIGABRT", "an abort", "crash.py line 6, in load_data; peak memory"),
])
def test_a_task_that_faults_is_told_as_its_own_crash_where_its_script_was(tmp_path, how, signal_name, said, where):
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    run = kwnb.launch(script, n=2, args=how, runs_dir=tmp_path / "runs", cwd=tmp_path, name=f"crash-{how}")
    codes = run.wait(90)
    assert codes[1] in (-11, -6) and codes[0] in (0, -15, -9), run.summary()
    assert [d.kind for d in run.diagnoses] == ["native_crash"], run.summary()
    message = run.diagnoses[0].message
    assert message.startswith(f"worker 1 crashed with {signal_name} ({said}) at {where}"), message
    assert "from outside" not in run.summary() and "compiled library" in message, run.summary()
    assert f"Fatal Python error: {'Segmentation fault' if how == 'segfault' else 'Aborted'}" in \
        run.diagnoses[0].evidence, run.diagnoses[0].evidence
