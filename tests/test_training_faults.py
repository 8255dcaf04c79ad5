"""The second tier of diagnoses on real 2-worker runs (tests/scripts/diagnose_fit.py): uneven steps, different
code paths, input that runs out, a NaN loss, the OOM killer. Each kind names the right task, fires within
~15 s of its cause (measured against what kwnb itself saw: a task's exit, the line it read), and shows in
the summary; no `error`, `killed` or `peer_lost` blames the task that only failed second. What kwnb makes of
TensorFlow's words is checked on runs replayed from real captures (tests/replay.py; tests/test_replay_drift.py
checks TensorFlow still prints them); the OOM killer and three runs at once on real runs.
"""
from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import kwnb
from kwnb.machine import limits
from kwnb.task.runfolder import POSITION_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SCRIPT = Path(__file__).parent / "scripts" / "diagnose_fit.py"
CAUSE_SECONDS = 15  # the bound between a cause and its diagnosis


def launch(tmp_path, mode, *extra, **options):
    return kwnb.launch(SCRIPT, n=2, name=mode, args=" ".join([mode, *extra]), runs_dir=tmp_path / "runs",
                       cwd=tmp_path, **options)


def only(run, kind):
    found = [d for d in run.diagnoses if d.kind == kind]
    assert len(found) == 1, run.summary()
    assert f"  - {kind}: {found[0].message}" in run.summary()  # the summary, `kwnb run` and summary.txt say it
    return found[0]


def no_blame_on(run, position):
    return not any(d.kind in ("error", "killed", "peer_lost") and d.task == position for d in run.diagnoses)


def test_a_custom_loop_with_fewer_steps_on_one_task_is_uneven_steps_not_a_crash(replayed):
    """The issue's run: worker 1 ends its loop early and exits 0; the chief then fails in a collective."""
    run = replayed["loop"]
    assert run.wait(0) == [1, 0], run.summary()
    uneven = only(run, "uneven_steps")
    assert uneven.task == 1 and uneven.message.startswith("worker 1 finished its training loop and exited normally")
    assert "at step 20/20" in uneven.message and "worker 0 was still training (it had reached step 2" in uneven.message
    assert "repeat()" in uneven.message and "steps_per_epoch" in uneven.message
    assert uneven.since - run.workers[1].ended_at < CAUSE_SECONDS
    assert any("UnavailableError" in line or "Socket closed" in line or "unhealthy" in line for line in uneven.evidence)
    assert no_blame_on(run, 0) and no_blame_on(run, 1)
    assert run.reason.startswith("worker 1 finished its training loop"), run.reason


def test_fit_with_fewer_steps_per_epoch_on_one_task_is_uneven_steps(replayed):
    run = replayed["uneven"]
    codes = run.wait(0)
    assert codes[0] != 0, run.summary()
    uneven = only(run, "uneven_steps")
    # fit meets the peer in an epoch-end collective with other tensors: TensorFlow's shape mismatch
    # what differs, from the bars' counts (not the last step drawn, which lags and changed the message as it came)
    assert uneven.message.startswith("the tasks ran different numbers of steps (an epoch is 10 steps on worker 0, "
                                     "5 on worker 1, as their progress bars say)"), uneven.message
    assert uneven.task == 1, uneven.message  # worker 1 planned 5 steps an epoch (its bar says /5), the chief 10
    assert run.reason.startswith(uneven.message), run.reason  # the words it was first said in are the ones it keeps
    assert no_blame_on(run, 0) and no_blame_on(run, 1)
    first_exit = min(t.ended_at for t in run.workers)
    assert uneven.since - first_exit < CAUSE_SECONDS


def test_a_chief_only_collective_is_named_as_different_code_paths(replayed):
    run = replayed["paths"]
    paths = only(run, "uneven_steps")
    assert paths.task == 0 and paths.message.startswith("the tasks took different code paths"), paths.message
    assert "worker 0 in diagnose_fit.py line" in paths.message and "in chief_only_summary" in paths.message
    assert "worker 1 in diagnose_fit.py line" in paths.message and "code under `if task_index == 0`" in paths.message
    assert any("mismatch" in line or "Collective instance" in line for line in paths.evidence)
    assert no_blame_on(run, 0) and no_blame_on(run, 1)
    assert paths.since - run.workers[0].signals.mismatch[0] < CAUSE_SECONDS


def test_input_that_runs_out_and_a_nan_loss_are_told_with_their_fix(replayed):
    run = replayed["data"]
    assert run.wait(0) == [0, 0], run.summary()  # fit returns on both: exit 0, and yet the run went wrong
    exhausted = only(run, "input_exhausted")
    assert exhausted.task in (0, 1) and "ran out of input data in epoch 1" in exhausted.message
    assert "(and worker" in exhausted.message and ".repeat()" in exhausted.message and "20 batches" in exhausted.message
    assert "Your input ran out of data" in exhausted.evidence[0]
    first_read = min(t.signals.input_exhausted[0] for t in run.workers)
    assert exhausted.since - first_read < CAUSE_SECONDS
    nan = only(run, "nan_loss")
    # Told on the task whose NaN kwnb read first: both print it at their epoch's end, within a poll of each other
    # (the capture's worker 1 49 ms before the chief; the real run of tests/test_replay_drift.py told worker 1 too).
    assert nan.task in (0, 1) and nan.message.startswith(f"worker {nan.task}'s loss became NaN at epoch 1"), nan.message
    assert all(math.isnan(task.metrics.history()[0]["loss"]) for task in run.workers)
    assert "learning rate" in nan.message and nan in run.diagnosis_history
    # Within the bound of the line that printed it. Replayed, the chief exits at most MAX_GAP (0.5 s) after
    # that line, within one diagnosis pass (DIAGNOSE_SECONDS, 0.5 s): the pass its exit brings may be the one that
    # tells it (on CI, 35 microseconds after the exit), as the captured run's 20 s between the two never allowed.
    assert nan.since - run.workers[0].ended_at < CAUSE_SECONDS
    assert not any(d.kind in ("error", "killed", "peer_lost", "uneven_steps") for d in run.diagnoses)


def test_a_custom_loop_that_runs_out_of_data_is_input_exhausted_not_an_error(replayed):
    run = replayed["loopdata"]
    exhausted = only(run, "input_exhausted")
    # 256 examples in global batches of 32: 8 steps, then the 9th finds none
    assert "ran out of input data after step 8/40, diagnose_fit.py line" in exhausted.message, exhausted.message
    assert "in <module> (tf.data: OutOfRangeError, End of sequence)" in exhausted.message
    assert "End of sequence" in exhausted.evidence[0]
    assert not any(d.kind in ("error", "uneven_steps") for d in run.diagnoses), run.summary()
    assert exhausted.since - min(t.signals.input_exhausted[0] for t in run.workers) < CAUSE_SECONDS
    assert "ran out of input data" in run.reason


# ----- out_of_memory: worker 1 in a memory cgroup the test makes ---------------------------------------
OOM_LIMIT = 700 * 2**20  # a TF task holds ~450 MB (its libraries count); it grows 50 MB a batch past this


def _memory_cgroup() -> Path:
    """A fresh cgroup v1 or v2 memory group with OOM_LIMIT, or skip with the reason."""
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    name = f"kwnb-test-oom-{uuid.uuid4().hex[:8]}"
    v1, v2 = Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.subtree_control"
    if (v1 / "memory.limit_in_bytes").exists():
        group, limit_file = v1 / name, "memory.limit_in_bytes"
    elif controllers.exists() and "memory" in controllers.read_text().split():
        group, limit_file = v2 / name, "memory.max"
    else:
        pytest.skip("no writable cgroup v1 memory hierarchy, nor a v2 one with the memory controller")
    try:
        group.mkdir()
        (group / limit_file).write_text(str(OOM_LIMIT))
        if limit_file == "memory.limit_in_bytes" and (group / "memory.memsw.limit_in_bytes").exists():
            (group / "memory.memsw.limit_in_bytes").write_text(str(OOM_LIMIT))  # no escape into swap
    except OSError as error:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    return group


def test_a_task_the_oom_killer_ends_is_out_of_memory_not_killed(tmp_path):
    group = _memory_cgroup()
    # Worker 1 joins the group before Python starts; the chief stays where kwnb is.
    wrapper = tmp_path / "python-in-cgroup"
    wrapper.write_text(f'#!/bin/sh\nif [ "${POSITION_ENV}" = 1 ]; then echo $$ > {group}/cgroup.procs; fi\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    try:
        run = launch(tmp_path, "hog", "40", python=str(wrapper), warm=False, on_failure="keep")
        codes = run.wait(240)
        if codes[0] is None:
            run.stop()
        assert run.exit_codes[1] == -9, run.summary()
        assert limits.oom_kills(limits.Cgroup(group, 1 if "memory/" in str(group) else 2)) >= 1
        oom = only(run, "out_of_memory")
        assert oom.task == 1 and oom.message.startswith("worker 1 was killed by the kernel's OOM killer: its memory "
                                                        "peaked at"), oom.message
        assert any(d.kind == "peer_lost" and "killed by the kernel's OOM killer" in d.message for d in run.diagnoses)
        assert "against a limit of 700 MiB (cgroup v" in oom.message and "`killed` instead" in oom.message
        assert any("oom_kill 0 -> 1" in line for line in oom.evidence), oom.evidence
        assert oom.since - run.workers[1].ended_at < CAUSE_SECONDS
        assert not any(d.kind == "killed" for d in run.diagnoses)
        assert run.reason == "" or run.reason.startswith("worker 1 was killed by the kernel's OOM killer")
    finally:
        for _ in range(50):  # the group can be removed once its last process is gone
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_kill_from_outside_stays_killed_when_the_oom_counters_did_not_move(tmp_path):
    """The cheap half of telling them apart, without TensorFlow: a plain SIGKILL gives no OOM evidence."""
    import dataclasses

    from kwnb.engine.diagnoses import oom
    from kwnb.engine.tasks.view import TaskView
    from kwnb.task.tf_config import TaskId

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    task = TaskView(0, TaskId("worker", 0), True, "running", "training", pid=child.pid, alive=True)
    watch = oom.MemoryWatch()
    try:
        watch.note(task)
        child.kill()
        child.wait()
        dead = dataclasses.replace(task, alive=False, returncode=-9, status="failed", phase="failed")
        assert watch.evidence(dead) is None and watch.killed([dead]) == {}
    finally:
        child.kill()


def test_no_false_alarm_with_three_clean_runs_at_once(tmp_path):
    """The suite's small version of benchmarks/load.py (six learners x two runs, docs/diagnoses.md's figures): three
    2-worker runs at once with kwnb's defaults all finish and say nothing but a join that really was late."""
    runs = [kwnb.launch(SCRIPT, n=2, name=f"cell{i}", args="clean 20", runs_dir=tmp_path / "runs", cwd=tmp_path)
            for i in range(3)]
    for run in runs:
        assert run.wait(300) == [0, 0], run.summary()
    for run in runs:
        joined = [task.signals.connected_at for task in run.workers]
        late = abs(joined[0] - joined[1]) > 9  # kwnb says waiting_for_peers after a 10 s wait
        assert all(d.kind == "waiting_for_peers" and late for d in run.diagnosis_history), run.summary()
        assert run.settings.stall_after == 60 and run.settings.on_failure == "stop"  # the defaults a learner gets


# ----- the rules on TF 2.21's captured logs (tests/data/tf-2.21/), without TensorFlow -------------------
DATA = Path(__file__).parent / "data" / "tf-2.21"


def replay(tmp_path, *tasks):
    """Tasks that read a captured log each: (log name, exit code, seconds after 0 at which it ended)."""
    from kwnb.engine.tasks.task import Task
    from kwnb.task.tf_config import TaskId

    made = []
    for position, (name, code, ended) in enumerate(tasks):
        task = Task(position, TaskId("worker", position), tmp_path / f"{position}.log", tmp_path / f"{position}.jsonl",
                    10, user_files=("loop.py", "train.py", "data_fit.py", "chief_checkpoint_fit.py"))
        text = (DATA / name).read_bytes().decode()
        task.metrics.feed(text)
        task.signals.record(task._scanner.feed(text) + task._scanner.close(), now=ended - 0.5 if code else 5.0)
        task.returncode, task.ended_at, task.started_at, task.is_chief = code, ended, 0.0, position == 0
        made.append(task)
    return made


def views(*tasks):
    """The tasks as the diagnoses read them (engine/tasks/view.py)."""
    from kwnb.engine.tasks.view import view_of

    return [view_of(task, 30.0) for task in tasks]


def look(tasks, now: float = 30.0):
    """One diagnosis pass over `tasks` as every kind's function reads it (engine/diagnoses/diagnosis.py)."""
    from kwnb.engine.diagnoses.diagnosis import Look, RunView

    return Look(RunView(tasks=tuple(tasks), name="main", script="main.py"), now)


def test_the_rules_on_captured_logs(tmp_path):
    from kwnb.engine.diagnoses import training_faults as training

    # The capture: worker 1 ran 25 steps and exited 0 at 6.0 s; the chief failed at 6.8 s ("Socket closed").
    chief, early = replay(tmp_path, ("uneven-steps-worker-0.log", 1, 6.8), ("uneven-steps-worker-1.log", 0, 6.0))
    (uneven,) = training.uneven_steps(look(views(chief, early)))
    assert uneven.task == 1 and "worker 1 finished its training loop and exited normally" in uneven.message
    assert "while worker 0 was still training;" in uneven.message  # ("step 25/60, loss": no step kwnb parses)
    assert "in a collective at loop.py line " in uneven.message and "in a custom loop, the same number of iterations" in uneven.message
    # Both fits ended (2/2 epochs, 5/5 steps), then the chief alone called model.save: not steps, a code path after
    # training; told on the task that left, pointing at the line where the chief waited.
    chief, early = replay(tmp_path, ("chief-only-save-worker-0.log", 1, 22.0), ("chief-only-save-worker-1.log", 0, 11.4))
    (after,) = training.uneven_steps(look(views(chief, early)))
    assert after.task == 1 and after.message.startswith("worker 1 finished training and exited normally at epoch 2/2, "
                                                        "step 5/5; worker 0 had finished training too, then ran a "
                                                        "collective worker 1 never ran (data_fit.py line 29, in "
                                                        "<module>) and failed waiting for it"), after.message
    assert "different code paths after training" in after.message and "every task calls model.save" in after.message
    assert "still training" not in after.message and "repeat()" not in after.message
    # The shape: the heartbeat's "unhealthy ... The tasks have crashed", then UnavailableError, after the
    # peer's exit 0 (the words of peer-stopped's survivor, with worker 1 as having exited normally first).
    chief, early = replay(tmp_path, ("peer-stopped-worker-0.log", 1, 20.0), ("clean-worker-1.log", 0, 1.0))
    assert [d.task for d in training.uneven_steps(look(views(chief, early)))] == [1]
    # A chief that outlives its peer by 15 s hears "unhealthy" too, and exits 0: nothing to say.
    chief, early = replay(tmp_path, ("clean-chief-last-worker-0.log", 0, 20.0), ("clean-chief-last-worker-1.log", 0, 5.0))
    assert training.uneven_steps(look(views(chief, early))) == []
    # Both tasks raised at different lines: different code paths, told on the chief.
    chief, other = replay(tmp_path, ("shape-mismatch-worker-0.log", 1, 5.6), ("shape-mismatch-worker-1.log", 1, 6.5))
    (paths,) = training.uneven_steps(look(views(chief, other)))
    assert paths.task == 0 and "loop.py line" in paths.message and "in chief_only_summary" in paths.message
    assert training.input_exhausted(look(views(chief, other))) is None and training.nan_loss(look(views(chief, other))) is None
    # Both failed in fit, at the same line, having planned the same steps: not a step count but a collective inside
    # fit that the chief alone ran (its ModelCheckpoint, at its first epoch's end)
    chief, other = replay(tmp_path, ("chief-only-checkpoint-worker-0.log", 1, 8.0),
                          ("chief-only-checkpoint-worker-1.log", 1, 6.5))
    (callback,) = training.uneven_steps(look(views(chief, other)))
    assert callback.task == 0 and callback.message.startswith("the tasks planned the same steps (an epoch is 5 steps on "
                                                              "every task) but ran different collectives inside "
                                                              "model.fit (worker 0 at epoch 1/3, step 5/5; worker 1 at "
                                                              "epoch 2/3"), callback.message
    assert "ModelCheckpoint" in callback.message and "different numbers of steps" not in callback.message
    # NaN in the progress bars: the chief's first, at the first step kwnb read it.
    chief, other = replay(tmp_path, ("nan-loss-worker-0.log", 0, 9.9), ("nan-loss-worker-1.log", 0, 9.6))
    nan = training.nan_loss(look(views(chief, other)))
    assert nan.task == 0 and nan.message.startswith("worker 0's loss became NaN at epoch 1, step "), nan.message
    # A custom loop that prints the loss tensor itself: no curve kwnb reads, the line is quoted instead
    chief, other = replay(tmp_path, ("nan-loss-loop-worker-0.log", 0, 11.3), ("nan-loss-loop-worker-1.log", 0, 11.3))
    nan = training.nan_loss(look(views(chief, other)))
    assert nan.task == 0 and nan.message.startswith("worker 0's loss became NaN (the first line that says "
                                                    'so: "step 1 loss tf.Tensor(nan, shape=(), dtype=float32)"): '
                                                    "training has diverged"), nan.message


def test_a_stall_after_a_peer_exited_normally_is_uneven_steps(tmp_path):
    """Where TensorFlow's heartbeat does not end it, a task left waiting in a collective for a peer that exited 0
    is a hang: the stall is told as uneven_steps, on the task that finished."""
    from kwnb.engine.diagnoses.stall import stalled
    from kwnb.engine.diagnoses.diagnosis import RunView
    from kwnb.engine.live.settings import DEFAULTS

    chief, early = replay(tmp_path, ("clean-worker-0.log", None, None), ("clean-worker-1.log", 0, 5.0))
    in_collective = ('Current thread 0x00007f00 (most recent call first):\n'
                     '  File "/venv/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute\n'
                     '  File "/job/main.py", line 30 in <module>\n'
                     '  File "/repo/kwnb/task/bootstrap.py", line 90 in <module>\n')

    def run():
        return RunView(tasks=tuple(views(chief, early)), name="main", script="main.py", user_files=("/job/main.py",),
                       stall_after=DEFAULTS.stall_after)  # as the supervisor hands in a default run's
    # Both logs show every step of their fit (2/2 epochs, 5/5 steps): the chief waits in a collective after it
    diagnosis = stalled(run(), 100.0, {0: in_collective})
    assert (diagnosis.kind, diagnosis.task) == ("uneven_steps", 1), diagnosis.message
    assert diagnosis.message.startswith("worker 1 finished training and exited normally; the others had finished "
                                        "training too and wait for it in a collective it never ran (worker 0 in main.py "
                                        "line 30, in <module>)"), diagnosis.message
    assert "different code paths after training" in diagnosis.message
    chief.metrics.total_epochs = 4  # had the chief planned more epochs, it would still be training: the step count
    diagnosis = stalled(run(), 100.0, {0: in_collective})
    assert diagnosis.message.startswith("worker 1 finished its training loop and exited normally while the others "
                                        "still wait for it in a collective (worker 0 in main.py line 30, in <module>)")
    early.returncode = None  # both alive, both in TensorFlow: a stall with no culprit, for the run as a whole
    diagnosis = stalled(run(), 100.0, {0: in_collective, 1: in_collective})
    assert (diagnosis.kind, diagnosis.task) == ("stalled", None)
    # Both alive, both in TensorFlow, at different lines of main.py: a chief-only collective that hangs (where it
    # does not fail with a shape mismatch): different code paths, told on the chief
    chief_only = in_collective.replace("line 30 in <module>", "line 56 in chief_only_summary")
    diagnosis = stalled(run(), 100.0, {0: chief_only, 1: in_collective})
    assert (diagnosis.kind, diagnosis.task) == ("uneven_steps", 0), diagnosis.message
    assert diagnosis.message.startswith("the tasks wait in different collectives (worker 0 in main.py line 56, in "
                                        "chief_only_summary; worker 1 in main.py line 30, in <module>); no task has "
                                        "made progress for 60 s: they took different code paths"), diagnosis.message


def test_a_parameter_server_job_whose_chief_is_slow_is_no_collective_hang():
    """Kubeflow's dist_mnist in the corpus, under a load average of 30: the chief silent for 60 s inside fit, the
    worker and the ps in server.join() (their only line): every task 'waits inside TensorFlow at different lines',
    which read as a chief-only collective (uneven_steps, which stays). Nothing there is a collective: at most a
    stall, withdrawn when the chief prints again."""
    from kwnb.engine.diagnoses.training_faults import collective_hang
    from kwnb.engine.tasks.task import Signals
    from kwnb.engine.tasks.view import TaskView
    from kwnb.task.tf_config import TaskId

    def waiting_in(line, function):
        return ('Current thread 0x00007f00 (most recent call first):\n'
                '  File "/venv/site-packages/tensorflow/python/eager/execute.py", line 53 in quick_execute\n'
                f'  File "/job/dist_mnist.py", line {line} in {function}\n')

    roles = [TaskId("chief", 0), TaskId("worker", 0), TaskId("ps", 0)]
    tasks = [TaskView(position=i, id=task, is_chief=i == 0, status="running", phase="training", returncode=None,
                      signals=Signals(), alive=True) for i, task in enumerate(roles)]
    dumps = {0: waiting_in(137, "main"), 1: waiting_in(110, "main"), 2: waiting_in(110, "main")}
    assert collective_hang(tasks, dumps, ("/job/dist_mnist.py",), "(...)", []) is None
    workers = [dataclasses.replace(t, id=TaskId("worker", i)) for i, t in enumerate(tasks[:2])]  # MWMS: it is one
    assert collective_hang(workers, {0: dumps[0], 1: dumps[1]}, ("/job/dist_mnist.py",), "(...)", []).kind == \
        "uneven_steps"
