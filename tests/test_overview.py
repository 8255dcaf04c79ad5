"""The whole cluster at a glance: phases, the overview, the timeline and quiet logs, and the diagnosis of the
wait, on a real run where worker 1 joins 30 s late (tests/scripts/diagnose_fit.py late)."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

import kwnb
from kwnb.engine.records.summary import overview_lines, rate_text
from kwnb.engine.tasks.vitals import Vitals
from kwnb.notebook.overview import badge
from kwnb.notebook.task_tab import fold_label, log_html
from kwnb.notebook.overview import overview_html
from kwnb.pictures.timeline import PHASE_COLOURS, segments
from kwnb.pictures.outputs import pictures_ready

SCRIPT = Path(__file__).parent / "scripts" / "diagnose_fit.py"


@pytest.fixture(scope="module")
def late_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("overview")
    run = kwnb.launch(SCRIPT, n=2, name="late", args="late", runs_dir=base / "runs", cwd=base)
    seen = []  # (phase of worker 0, phase of worker 1, overview html) while it runs
    waiting = []  # the first waiting_for_peers diagnoses and when the chief's wait began (None once it ends)
    while not run.done:
        snapshot = run.snapshot()
        seen.append((snapshot.tasks[0].phase, snapshot.tasks[1].phase, overview_html(snapshot, snapshot.diagnoses, badge)))
        waiting_at = run.workers[0].signals.waiting_at  # read first: the wait may end (and the diagnosis go) between
        waiting = waiting or [(d, waiting_at) for d in run.diagnoses if d.kind == "waiting_for_peers"]
        time.sleep(0.5)
    assert run.wait() == [0, 0], run.summary()
    assert pictures_ready(run)  # timeline.png follows the run's end (issue 31)
    return run, seen, waiting


@pytest.mark.slow
def test_phases_say_who_waited_for_whom(late_run):
    run, seen, _ = late_run
    assert ("joining", "starting") in [(a, b) for a, b, _ in seen]  # the chief waits while worker 1 starts
    chief, late = (task.vitals.time_in(until=task.ended_at) for task in run.workers)
    assert chief["joining"] > 20 and late["starting"] > 25 and late.get("joining", 0) < 5
    assert chief["training"] > 0 and late["training"] > 0
    phases = [phase for _, phase in run.workers[0].vitals.phases]
    assert phases[:3] == ["starting", "joining", "training"] and phases[-1] == "finished"
    assert phases[3:-1] in ([], ["finishing"])  # after "Epoch 2/2", while TensorFlow shuts down (if seen)


@pytest.mark.slow
def test_a_late_worker_is_named_while_the_chief_waits_and_forgotten_once_it_joins(late_run):
    """(From tests/test_diagnose.py: this run is the same late worker, and one run saves about 35 s.)"""
    run, _, waiting = late_run
    assert waiting, run.summary()
    waiting, waiting_at = waiting[0]
    assert waiting.task == 1 and "worker 0 has waited" in waiting.message and "is still starting" in waiting.message
    assert waiting.since - waiting_at < 15
    assert run.diagnoses == []


@pytest.mark.slow
def test_the_overview_shows_every_task_with_phase_rate_and_memory(late_run):
    run, seen, _ = late_run
    waiting = [html for a, _, html in seen if a == "joining"][-1]  # (its first second may come before a task's
    # memory is first sampled: a forked chief starts joining within a second of its start)
    assert waiting.count("<tr>") == 3 and "waiting for peers" in waiting and " MiB" in waiting
    assert "&#9888; worker 1" in next(html for _, _, html in reversed(seen) if "&#9888;" in html)
    summary = run.summary()
    assert "overview:" in summary and "memory" in overview_lines(run)[1].split()  # the dashboard's columns
    row = next(line for line in overview_lines(run) if line.strip().startswith("worker 0"))
    assert "joining" in row and "training" in row and "MiB" in row


def rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


@pytest.mark.slow
def test_the_timeline_is_saved_with_the_run(late_run):
    run, _, _ = late_run
    png = run.dir / "timeline.png"
    assert png.read_bytes().startswith(b"\x89PNG")
    colours = {colour for _, colour in Image.open(png).convert("RGB").getcolors(1 << 16)}
    # A lane per task, each phase in its colour: the late worker 1 joined, so both "joining" and "training" show.
    assert {rgb(PHASE_COLOURS[phase]) for phase in ("joining", "training")} <= colours
    assert Image.open(png).size[1] >= round((0.42 * 2 + 1.25) * 90)
    assert f"timeline: {png}" in run.summary()


@pytest.mark.slow
def test_runtime_lines_are_folded_but_kept(late_run):
    run, _, _ = late_run
    chief = run.workers[0]
    assert chief.runtime_lines > 5
    quiet, everything = run.logs(0), run.logs(0, all=True)
    # Lines every multi-worker TF 2.21 task writes: oneDNN's notice is no such line (TensorFlow prints it only on
    # CPUs with AVX512-VNNI or AMX; this test failed on an AMD EPYC machine when it asked for it).
    assert "I0000" not in quiet and "I0000" in everything and "coordination_service" in everything
    assert "DONE" in quiet and "Epoch 2/2" in quiet and "worker 0: late" in quiet
    assert "I0000" in chief.log_path.read_text()  # the file keeps every byte
    view = run.snapshot().tasks[0]
    assert "I0000" not in log_html(view) and "I0000" in log_html(view, show_runtime=True)
    assert fold_label(view, False) == f"{chief.runtime_lines} TensorFlow runtime messages hidden - show"


def test_the_log_view_folds_the_lines_the_reader_marked():
    """The dashboard decides nothing: it leaves out the lines the task's reader marked as runtime lines."""
    from kwnb.engine.records.snapshot import TaskView
    from kwnb.task.tf_config import TaskId

    view = TaskView(position=0, id=TaskId("worker", 0), is_chief=True, status="running", phase="training",
                    tail=("kept one", "marked one", "kept two"), tail_runtime=(1,), total_lines=10, runtime_lines=4)
    folded, shown = log_html(view), log_html(view, show_runtime=True)
    assert "kept one\nkept two" in folded and "marked one" not in folded
    assert "kept one\nmarked one\nkept two" in shown and "7 earlier lines not shown" in folded
    assert fold_label(view, False) == "4 TensorFlow runtime messages hidden - show"


def test_segments_follow_phases_across_a_restart():
    vitals = Vitals()
    vitals.phases = [(0.0, "starting"), (2.0, "joining"), (3.0, "training"), (9.0, "failed"), (10.0, "starting"),
                     (12.0, "training")]
    task = SimpleNamespace(phases=vitals.phases, ended_at=None)
    assert segments(task, now=15.0) == [(0.0, 2.0, "starting"), (2.0, 3.0, "joining"), (3.0, 9.0, "training"),
                                        (10.0, 12.0, "starting"), (12.0, 15.0, "training")]
    assert vitals.time_in(until=15.0) == {"starting": 4.0, "joining": 1.0, "training": 9.0}


def test_a_join_read_in_the_same_piece_as_training_is_still_a_phase_from_the_servers_start():
    """A loaded machine may read a restarted chief's server start, its join and its first epoch in one piece (CI saw
    its phases go starting, training): it joined all the same, from when its server came up."""
    from kwnb.engine.tasks.status import Phase

    joined = Vitals()
    joined.restarted(10.0)
    assert joined.update(Phase.TRAINING, 1, now=14.0, server_at=13.5)
    assert joined.phases == [(10.0, Phase.STARTING), (13.5, Phase.JOINING), (14.0, Phase.TRAINING)]
    alone = Vitals()  # a script that joins no cluster: no server, no joining
    alone.restarted(10.0)
    assert alone.update(Phase.TRAINING, 1, now=14.0)
    assert alone.phases == [(10.0, Phase.STARTING), (14.0, Phase.TRAINING)]
    read_apart = Vitals()  # read in two pieces: joining as seen, nothing added
    read_apart.restarted(10.0)
    read_apart.update(Phase.JOINING, None, now=12.0, server_at=12.0)
    read_apart.update(Phase.TRAINING, 1, now=14.0, server_at=12.0)
    assert [phase for _, phase in read_apart.phases] == [Phase.STARTING, Phase.JOINING, Phase.TRAINING]


def test_an_ended_task_shows_its_rate_over_its_training_as_the_summary_does():
    """The overview showed "-" for the rate of every ended task (a past run's table had no rate at all),
    while the summary's table gave each task's steps per second over its training."""
    from kwnb.engine.records.snapshot import RunSnapshot, TaskView
    from kwnb.task.tf_config import TaskId

    tasks = tuple(TaskView(position=i, id=TaskId("worker", i), is_chief=i == 0, status="finished", phase="finished",
                           alive=False, rate=rate, phases=((0.0, "training"), (9.0, "finished")))
                  for i, rate in enumerate((53.125, None)))
    run = RunSnapshot(name="r", dir=Path("/nonexistent"), status="finished", done=True, tasks=tasks,
                      started_at=0.0, ended_at=9.0)
    rows = overview_html(run, ()).split("<tr>")[2:]
    assert f"<td>{rate_text(53.125)}</td>" in rows[0] and rate_text(53.125) == "53.1 steps/s"
    assert "<td>-</td>" in rows[1]  # a task that showed no steps has no rate
    assert rate_text(53.125) in next(line for line in overview_lines(run) if line.strip().startswith("worker 0"))
