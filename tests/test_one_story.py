"""One story per run (issue 39): the diagnoses of one run name the root cause first and its consequences as
consequences, linked to it and worded so, never contradicting it; and the advice names what the program did
when kwnb can read it in the script.

The issue's run is tests/scripts/shard_after_batch.py: its dataset sharded by hand after batching, then again by
MultiWorkerMirroredStrategy, so the tasks planned 9 and 8 steps an epoch. kwnb said `uneven_steps`, rightly, and
beside it `peer_lost` saying worker 1 "crashed", which it had not: it failed in the very collective
`uneven_steps` told of. Checked on a real run, and on its captured logs (tests/data/tf-2.21/shard-after-batch-*)
with the other pairs a run can show (an error or a kill, and the peer that lost it) through the whole pass.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import kwnb
from kwnb.engine.diagnoses import diagnose
from kwnb.engine.diagnoses.diagnosis import Diagnosis, RunView
from kwnb.engine.readers.program import hand_sharding

SCRIPTS = Path(__file__).parent / "scripts"
SCRIPT = SCRIPTS / "shard_after_batch.py"
DATA = Path(__file__).parent / "data" / "tf-2.21"
SHARD_LINE = 1 + SCRIPT.read_text().splitlines().index(
    "    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).shard(num_workers, index)")


def told_crashed(diagnoses) -> list[str]:
    """Messages that call a task's end a crash (the words "(TensorFlow calls it a crash; it was not)" aside)."""
    return [d.message for d in diagnoses if "crashed" in d.message.replace("calls it a crash; it was not", "")]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sharding_by_hand_after_batching_is_one_story_with_its_cause_named(tmp_path):
    # on_failure="keep": the chief finds out by itself that its peer is gone (TensorFlow's heartbeat, ~10 s), as
    # in the run; kwnb's stop after 5 s could come first.
    run = kwnb.launch(SCRIPT, n=2, name="shard", runs_dir=tmp_path / "runs", cwd=tmp_path, on_failure="keep")
    codes = run.wait(300)
    if None in codes:
        run.stop()
    assert run.exit_codes[1] == 1, run.summary()
    uneven = run.diagnoses[0]
    assert uneven.kind == "uneven_steps" and uneven.follows == "", run.summary()  # the root cause, first
    assert "the tasks ran different numbers of steps" in uneven.message, uneven.message
    # The advice names what the program did, where, and the fix, rather than repeat() and steps_per_epoch.
    assert (f"the script shards its dataset by hand after batching (shard_after_batch.py line {SHARD_LINE}: "
            f".batch(global_batch).shard(num_workers, index)), and MultiWorkerMirroredStrategy shards it again"
            ) in uneven.message, uneven.message
    assert "delete the .shard call" in uneven.message and "steps_per_epoch" not in uneven.message
    assert run.reason.startswith(uneven.message[:60]), run.reason
    assert told_crashed(run.diagnoses) == [], run.summary()
    rest = run.diagnoses[1:]
    assert all(d.follows == uneven.key for d in rest), run.summary()  # nothing else: consequences, linked
    if run.workers[0].signals.peer_reports:  # the chief heard that worker 1 was gone
        (lost,) = rest
        assert (lost.kind, lost.task) == ("peer_lost", 1), run.summary()
        assert lost.message.startswith("worker 0 lost its peer worker 1, which failed in the collective the tasks "
                                       "met with different tensors: a consequence of the uneven_steps above"), lost.message
    summary = run.summary()
    assert summary.index("  - uneven_steps: ") < summary.index("  - peer_lost: ") if rest else True


def test_the_fixed_program_is_found_clean_by_the_reader():
    """What the advice rests on: the reader finds the .shard after .batch in the program, and nothing once the
    .shard goes (or comes before .batch)."""
    (place,) = hand_sharding(str(SCRIPT), SCRIPT.read_text())
    assert (place.file, place.line, place.code) == ("shard_after_batch.py", SHARD_LINE,
                                                    ".batch(global_batch).shard(num_workers, index)")
    assert not place.auto_shard_off
    assert hand_sharding("a.py", "ds = tf.data.Dataset.range(9)\nds = ds.shard(2, 0)\nds = ds.batch(4)\n") == ()
    (named,) = hand_sharding("a.py", "ds = make()\nds = ds.batch(4).prefetch(1)\nds = ds.shard(2, 0)\n")
    assert named.line == 3
    off = "opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF\n"
    (without,) = hand_sharding("a.py", f"ds = d.batch(4).shard(2, 0)\n{off}")
    assert without.auto_shard_off
    assert hand_sharding("a.py", "not python (") == ()


# ----- the whole pass on captured logs -------------------------------------------------------------------
def replay(tmp_path, *tasks, stopped: bool = False):
    """Tasks that read a captured log each: (log name, exit code, seconds after 0 at which it ended); `stopped`:
    each stopped by kwnb or the user (Run.stop, the dashboard's Stop button) before it ended."""
    from kwnb.engine.tasks.task import Task
    from kwnb.engine.tasks.view import view_of
    from kwnb.task.tf_config import TaskId

    made = []
    for position, (name, code, ended) in enumerate(tasks):
        task = Task(position, TaskId("worker", position), tmp_path / f"{position}.log", tmp_path / f"{position}.jsonl",
                    10, user_files=("/job/shard_after_batch.py", "train.py"))
        text = (DATA / name).read_bytes().decode()
        task.metrics.feed(text)
        task.signals.record(task._scanner.feed(text) + task._scanner.close(), now=ended - 0.5)
        task.returncode, task.ended_at, task.started_at, task.is_chief = code, ended, 0.0, position == 0
        task._stop_requested = stopped
        made.append(task)
    return tuple(view_of(task, 30.0) for task in made)


def pass_over(tasks, **view) -> list[Diagnosis]:
    return diagnose.findings(RunView(tasks=tasks, name="main", script="train.py", **view), 30.0)


def test_a_peer_that_failed_in_the_uneven_collective_is_lost_as_a_consequence_not_a_crash(tmp_path):
    tasks = replay(tmp_path, ("shard-after-batch-worker-0.log", 1, 21.0), ("shard-after-batch-worker-1.log", 1, 6.0))
    found = pass_over(tasks, hand_sharding=hand_sharding(str(SCRIPT), SCRIPT.read_text()))
    assert [(d.kind, d.task) for d in found] == [("uneven_steps", 0), ("peer_lost", 1)], found
    uneven, lost = found
    assert lost.follows == uneven.key == "uneven_steps@0" and uneven.follows == ""
    assert told_crashed(found) == [], found
    assert "a consequence of the uneven_steps above, not a cause of its own" in lost.message
    assert "shards its dataset by hand after batching" in uneven.message
    # Without the script's source kwnb gives the general rule, and the story is the same.
    general = pass_over(tasks)
    assert "repeat() the dataset" in general[0].message and general[1].follows == general[0].key


def test_an_error_or_a_kill_is_the_root_and_the_lost_peer_its_consequence(tmp_path):
    raised = replay(tmp_path, ("peer-raises-worker-0.log", 1, 8.0), ("peer-raises-worker-1.log", 1, 5.0))
    error, lost = pass_over(raised)
    assert (error.kind, error.task, lost.kind, lost.task) == ("error", 1, "peer_lost", 1), (error, lost)
    assert lost.follows == error.key and lost.message.startswith(
        "worker 0 lost its peer worker 1, which failed with ValueError: a consequence of the error above"), lost.message
    assert told_crashed([error, lost]) == []
    killed = replay(tmp_path, ("peer-killed-worker-0.log", 1, 8.0), ("peer-killed-worker-1.log", -9, 5.0))
    kill, lost = pass_over(killed)
    assert (kill.kind, lost.kind) == ("killed", "peer_lost") and lost.follows == kill.key
    assert "which was killed by SIGKILL from outside kwnb: a consequence of the killed above" in lost.message
    # A custom loop whose data ran out on both tasks (OutOfRangeError): the peer that ran out was "crashed" too.
    exhausted = replay(tmp_path, ("input-exhausted-loop-worker-0.log", 1, 8.0),
                       ("input-exhausted-loop-worker-1.log", 1, 6.0))
    ran_out, lost = pass_over(exhausted)
    assert (ran_out.kind, lost.kind) == ("input_exhausted", "peer_lost") and lost.follows == ran_out.key
    assert "which ran out of input data: a consequence of the input_exhausted above" in lost.message
    assert told_crashed([ran_out, lost]) == []


def test_a_run_stopped_by_its_user_tells_no_lost_peer(tmp_path):
    """Stopped (Run.stop, the dashboard's Stop button), a TensorFlow task holds off TERM (its preemption notifier
    catches it) until kwnb KILLs it after its grace; the peer that outlives it by a moment logs the connection
    lost. Neither end is a fault of the run: no `killed`, no `error`, no `peer_lost` in red under "STOPPED"."""
    assert pass_over(replay(tmp_path, ("peer-killed-worker-0.log", 1, 8.0), ("peer-killed-worker-1.log", -9, 5.0),
                            stopped=True)) == []


def test_the_run_lists_the_root_cause_first_whatever_came_first():
    """A consequence seen a pass before its root (a peer's loss, then the collective that explains it) is listed
    after the root once the root is found, and takes the linked words."""
    early = Diagnosis("peer_lost", 1, "worker 0 lost its peer worker 1, which crashed (exit code 1)", since=1.0)
    kept, _ = diagnose.merge([], [early], 1.0)
    root = Diagnosis("uneven_steps", 0, "the tasks ran different numbers of steps", ended={1: "failed in it"})
    linked = Diagnosis("peer_lost", 1, "worker 0 lost its peer worker 1, which failed in it: a consequence",
                       follows=root.key)
    kept, new = diagnose.merge(kept, [linked, root], 5.0)
    assert [(d.kind, d.follows) for d in kept] == [("uneven_steps", ""), ("peer_lost", "uneven_steps@0")]
    assert kept[1].since == 1.0 and "crashed" not in kept[1].message and new == [root]
    # A consequence of a consequence stays in its story; a finding on its own keeps its place.
    alone = Diagnosis("nan_loss", 0, "worker 0's loss became NaN")
    further = Diagnosis("peer_lost", 2, "worker 0 lost its peer worker 2", follows="peer_lost@1")
    ordered = diagnose.in_story_order([further, alone, kept[1], kept[0]])
    assert [d.key for d in ordered] == ["nan_loss@0", "uneven_steps@0", "peer_lost@1", "peer_lost@2"]


def test_a_peer_that_failed_before_joining_is_waited_for_as_the_errors_consequence(tmp_path):
    """Worker 0 waits for worker 1 (the coordination service's "Waiting for 1/2 tasks"), which raised as it made
    its strategy: the wait is said as the error's consequence, in the error's words, after it."""
    import dataclasses

    waiter, failed = replay(tmp_path, ("waiting-worker-0.log", None, 15.0), ("collective-ops-late-worker-1.log", 1, 6.0))
    error, waiting = pass_over((dataclasses.replace(waiter, alive=True), failed))
    assert (error.kind, waiting.kind, waiting.task) == ("error", "waiting_for_peers", 1), (error, waiting)
    assert waiting.follows == error.key and waiting.message.endswith(
        "worker 1 failed with RuntimeError before joining: a consequence of the error above"), waiting.message
