"""Every role TensorFlow knows (issue 24): a dedicated chief task, a sidecar evaluator, and the
calling process as the coordinator of a parameter-server cluster.

The life-cycle rules (who decides the status, the evaluator's grace period, a failing evaluator) are
checked on plain-Python tasks, which start in a fraction of a second; one real TensorFlow run (marked
slow) trains a chief and a worker under MultiWorkerMirroredStrategy beside a SidecarEvaluator.
"""
from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import kwnb
from kwnb import cli
from kwnb.engine.tasks import roles
from kwnb.engine.tasks.status import Status, task_status
from kwnb.engine.live.cluster import MAX_TASKS, plan_tasks, tf_configs
from kwnb.engine.readers.evaluation import EvaluationParser
from kwnb.engine.records.summary import overview_lines
from kwnb.errors import NotPossible, OptionError
from kwnb.options import launch_options
from kwnb.pictures.plotting import curve_lines, run_series
from kwnb.task import sidecar
from kwnb.task.tf_config import TaskId
from kwnb.pictures.outputs import pictures_ready

SCRIPTS = Path(__file__).parent / "scripts"
ROLES_SCRIPT = """import json, os, signal, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
what = dict(arg.split("=") for arg in sys.argv[1:])
if what.get(task["type"] + "_term") == "ignore":  # as TensorFlow catches SIGTERM: only SIGKILL ends it
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(task["type"], task["index"], "started", flush=True)
time.sleep(float(what.get(task["type"], "0.3")))
sys.exit(int(what.get(task["type"] + "_exit", "0")))
"""


# ----- TF_CONFIG -------------------------------------------------------------------------------------

def test_a_chief_task_and_an_evaluator_in_every_tf_config():
    configs = tf_configs(2, chief=True, evaluator=True)
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                           {"type": "worker", "index": 1}, {"type": "evaluator", "index": 0}]
    cluster = configs[0]["cluster"]
    assert list(cluster) == ["chief", "worker"] and len(cluster["worker"]) == 2  # no evaluator: not in the cluster
    assert all(c["cluster"] == cluster for c in configs)
    assert len(plan_tasks(MAX_TASKS - 2, chief=True, evaluator=True)) == MAX_TASKS
    with pytest.raises(OptionError, match="more than kwnb starts"):
        plan_tasks(MAX_TASKS - 1, chief=True, evaluator=True)
    assert plan_tasks(0, chief=True) == [TaskId("chief", 0)]  # a chief alone is a cluster


def test_a_slurm_task_builds_the_same_tf_configs_on_its_node():
    """Under Slurm each task builds its own TF_CONFIG (kwnb/task/slurm_env.py), by the same definition."""
    from kwnb.task import slurm_env

    tasks = [{"type": t, "index": 0} for t in ("chief", "worker", "evaluator")]
    addresses = ["n1:20000", "n1:20001", "n2:20000"]
    assert [slurm_env.tf_config(tasks, procid, addresses) for procid in (0, 2)] == [
        {"cluster": {"chief": ["n1:20000"], "worker": ["n1:20001"]}, "task": {"type": "chief", "index": 0}},
        {"cluster": {"chief": ["n1:20000"], "worker": ["n1:20001"]}, "task": {"type": "evaluator", "index": 0}}]


def test_parameter_servers_without_a_chief_task_reserve_the_coordinators_entry():
    ps = tf_configs(2, ps=1)
    assert sorted(ps[0]["cluster"]) == ["chief", "ps", "worker"]
    assert [c["task"]["type"] for c in ps] == ["worker", "worker", "ps"]  # the chief is no task of the run
    own = tf_configs(2, ps=1, chief=True)  # the chief task coordinates: nothing more to reserve
    assert [len(own[0]["cluster"][t]) for t in ("chief", "worker", "ps")] == [1, 2, 1]


def test_the_options_reach_launch_from_the_magic_and_the_terminal(tmp_path):
    parsed = cli.build_parser().parse_args(["run", "main.py", "-n", "1", "--chief", "--evaluator"])
    options = launch_options(parsed)
    assert (options["n"], options["chief"], options["evaluator"]) == (1, True, True)
    assert launch_options(cli.build_parser().parse_args(["run", "main.py"]))["chief"] is False
    assert cli.main(["tf-config", "-n", "1", "--chief", "--evaluator", "--index", "2"]) == 0


def test_a_cell_and_a_terminal_start_every_role(tmp_path, monkeypatch, capsys):
    """`%%kw_worker ... --chief --evaluator` and `kwnb run ... --chief --evaluator`, on plain-Python tasks;
    an evaluator that ends by itself (as with max_evaluations) ends the run without waiting out its grace."""
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    shell.run_cell_magic("kw_worker", "cell.py -n 2 --chief --evaluator --network host --wait "
                                      "--args 'evaluator=0.5'", ROLES_SCRIPT)
    out = capsys.readouterr().out
    run = kwnb.get_run("cell")
    assert [t.name for t in run.workers] == ["chief:0", "worker:0", "worker:1", "evaluator:0"]
    assert run.exit_codes == [0, 0, 0, 0] and run.status == "finished" and run.elapsed < 25
    assert "kwnb run 'cell': finished" in out and "evaluator 0: finished exit 0" in out
    assert cli.main(["run", "cell.py", "-n", "1", "--chief", "--evaluator", "--network", "host", "-q",
                     "--name", "terminal", "--args", "evaluator=0.2"]) == 0
    out = capsys.readouterr().out
    assert "[chief 0]" not in out and "chief 0: finished" in out and "evaluator 0: finished" in out


# ----- rules, on plain-Python tasks ------------------------------------------------------------------

def launch_roles(tmp_path, *args, **options):
    script = tmp_path / "roles.py"
    script.write_text(ROLES_SCRIPT)
    options.setdefault("network", "host")
    return kwnb.launch(script, options.pop("n", 1), args=list(args), runs_dir=tmp_path / "runs", **options)


def test_training_ends_the_run_and_the_evaluator_gets_a_grace_period_then_is_stopped(tmp_path):
    run = launch_roles(tmp_path, "evaluator=60", chief=True, evaluator=True, evaluator_grace=1.0)
    assert run.wait(timeout=40) and run.done
    chief, worker, evaluator = run.workers
    assert [t.name for t in run.workers] == ["chief:0", "worker:0", "evaluator:0"]
    assert (chief.status, worker.status, evaluator.status) == ("finished", "finished", "stopped")
    assert evaluator.ended_at - max(chief.ended_at, worker.ended_at) >= 1.0
    assert run.status == "finished" and run.reason == ""  # a stopped evaluator is no stopped training
    assert any("evaluator 0 stopped 1 s after training ended" in note for note in run.notes)
    assert run.diagnoses == []  # kwnb stopped it: not "killed"
    summary = run.summary()
    assert "chief 0: finished exit 0" in summary and "evaluator 0: stopped" in summary
    assert "chief 0 (chief)" not in summary and "(chief)" not in summary  # a chief task needs no "(chief)"
    assert chief.is_chief and not worker.is_chief
    assert [line.split()[0:2] for line in overview_lines(run)[2:]] == [["chief", "0"], ["worker", "0"],
                                                                      ["evaluator", "0"]]
    assert evaluator.address == "" and evaluator.tf_config["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator.tf_config["cluster"]
    assert run.wait_ready(timeout=0) is False  # ended; and it never waits on the evaluator's port


def test_a_failing_evaluator_is_not_a_failure_of_training(tmp_path):
    run = launch_roles(tmp_path, "worker=2", "evaluator=0.1", "evaluator_exit=3", n=2, evaluator=True,
                       failure_grace=0.5)
    assert run.wait(timeout=40) and run.done
    assert [t.status for t in run.workers] == ["finished", "finished", "failed"]
    assert run.exit_codes == [0, 0, 3]
    assert run.status == "finished" and run.reason == ""  # the workers were not stopped
    assert "evaluator 0: failed exit 3" in run.summary()


def test_the_chief_task_decides_the_runs_status(tmp_path):
    # TensorFlow's (and a TFJob's) rule: the chief's success is the job's, even if a worker fails after it.
    after = launch_roles(tmp_path, "chief=0.1", "worker=1.5", "worker_exit=1", chief=True)
    assert after.wait(timeout=40) and after.done
    assert [t.status for t in after.workers] == ["finished", "failed"] and after.status == "finished"
    # The reason says the run finished with its chief; the worker's failure is told, not blamed for the run.
    assert after.reason == "the chief finished (exit 0); worker 0 failed after it (exit code 1)", after.summary()
    assert "finished after" in after.summary().splitlines()[0] and "worker 0: failed exit 1" in after.summary()
    failed_chief = launch_roles(tmp_path, "chief_exit=2", "worker=0.1", chief=True, name="failing_chief")
    assert failed_chief.wait(timeout=40) and failed_chief.status == "failed"
    no_chief = launch_roles(tmp_path, "worker=0.1", "worker_exit=1", n=1, name="no_chief")  # worker 0 is chief
    assert no_chief.wait(timeout=40) and no_chief.status == "failed"


def test_status_rules_without_processes():
    def task(kind, status):
        return SimpleNamespace(task_type=kind, status=status)

    assert roles.status([task("chief", "finished"), task("worker", "failed")], timed_out=False) == "finished"
    assert roles.status([task("chief", "finished"), task("worker", "failed")], timed_out=True) == "failed"
    assert roles.status([task("worker", "finished"), task("worker", "failed")], timed_out=False) == "failed"
    assert roles.status([task("worker", "finished"), task("evaluator", "failed")], timed_out=False) == "finished"
    assert roles.status([task("worker", "stopped"), task("evaluator", "finished")], timed_out=False) == "stopped"
    # while the run goes (one place decides both): starting or pending until a task runs, then running
    going = roles.status([task("worker", "starting"), task("worker", "pending")], timed_out=False, ended=False)
    assert going is Status.PENDING
    assert roles.status([task("worker", "starting")] * 2, timed_out=False, ended=False) is Status.STARTING
    assert roles.status([task("worker", "running"), task("worker", "finished")], False, ended=False) is Status.RUNNING
    assert roles.status([task("worker", "failed")], timed_out=False) is Status.FAILED  # a Status, not a plain word


def test_a_tasks_status_rule():
    assert task_status(Status.STARTING, None, False, serving=False, queued=True) is Status.PENDING
    assert task_status(Status.PENDING, None, False, serving=True, queued=False) is Status.RUNNING
    assert task_status(Status.RUNNING, None, False, serving=False, queued=True) is Status.RUNNING  # never back
    assert task_status(Status.RUNNING, 0, False, False, False) is Status.FINISHED
    assert task_status(Status.RUNNING, -15, True, False, False) is Status.STOPPED  # kwnb stopped it
    assert task_status(Status.RUNNING, 1, False, False, False) is Status.FAILED


# ----- the coordinator ------------------------------------------------------------------------------

def test_the_coordinator_gets_the_runs_cluster_with_its_own_free_port(tmp_path):
    run = launch_roles(tmp_path, "worker=30", "ps=30", ps=1)
    try:
        config = run.coordinator_tf_config()
        assert config["task"] == {"type": "chief", "index": 0}
        assert all(task.tf_config["cluster"] == config["cluster"] for task in run.workers)
        address = config["cluster"]["chief"][0]
        assert address not in [task.address for task in run.workers]
        host, port = address.rsplit(":", 1)
        with socket.socket() as probe:  # free for the coordinator to bind
            probe.bind((host, int(port)))
    finally:
        run.stop()
    plain = launch_roles(tmp_path, n=1, name="plain")
    plain.wait(timeout=30)
    with pytest.raises(NotPossible, match="no coordinator entry"):
        plain.coordinator_tf_config()


# ----- a parameter-server job's tasks serve ---------------------------------------------------------

SERVER_SCRIPT = """import json, os, socket, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
host, port = config["cluster"][task["type"]][task["index"]].rsplit(":", 1)
server = socket.socket()
server.bind((host, int(port)))
server.listen()  # as tf.distribute.Server does; the coordinator would connect here
print(task["type"], task["index"], "serving", flush=True)
time.sleep(4)
"""


def serving_phases(run) -> list[tuple]:
    """Each task's phases, as the overview's rows and the timeline's lanes show them, until the run ends."""
    from kwnb.notebook.overview import overview_html
    from kwnb.pictures.timeline import timeline_data

    seen = []
    while not run.done:
        snapshot = run.snapshot()
        rows = overview_html(snapshot, []).split("<tr>")[2:]
        seen += [(task.label, task.phase, row) for task, row in zip(snapshot.tasks, rows)]
        time.sleep(0.2)
    data = timeline_data(run.snapshot())
    seen += [(lane["label"], phase, "") for lane in data["lanes"] for _, phase in lane["phases"]]
    return seen


def test_a_parameter_server_jobs_workers_and_ps_serve_and_never_join(tmp_path):
    """Under ParameterServerStrategy the workers and the ps only serve (docs/roles.md): from their start to
    their end they are shown serving once their server is up, never joining (they never log a join)."""
    script = tmp_path / "serve.py"
    script.write_text(SERVER_SCRIPT)
    run = kwnb.launch(script, 2, ps=1, network="host", runs_dir=tmp_path / "runs")
    seen = serving_phases(run)
    assert run.exit_codes == [0, 0, 0], run.summary()
    assert {label for label, phase, _ in seen if phase == "serving"} == {"worker 0", "worker 1", "ps 0"}
    assert not [entry for entry in seen if entry[1] == "joining" or "waiting for peers" in entry[2]]
    assert all("<td>serving</td>" in row for _, phase, row in seen if phase == "serving" and row)
    assert all("serving" in line for line in overview_lines(run)[2:]), overview_lines(run)
    assert [task.serves for task in run.workers] == [True, True, True]
    plain = launch_roles(tmp_path, n=2, name="plain")  # workers without ps tasks: they train, not serve
    plain.wait(timeout=30)
    assert [task.serves for task in plain.workers] == [False, False]


# ----- the evaluator's curves -----------------------------------------------------------------------

# Lines of a real TF 2.21 / tf-keras 2.21 SidecarEvaluator task under kwnb (tests/scripts/roles_fit.py).
EVALUATOR_LOG = (
    "evaluator: cluster has ['chief', 'worker']\n"
    "INFO:tensorflow:Evaluation starts: Model weights loaded from latest checkpoint file /tmp/c/ckpt-2\n"
    "4/4 - 1s - loss: 0.6901 - accuracy: 0.5312 - 935ms/epoch - 234ms/step\n"
    "INFO:tensorflow:End of evaluation. Metrics: loss=0.6901 accuracy=0.5312\n"
    "INFO:tensorflow:Evaluation starts: Model weights loaded from latest checkpoint file /tmp/c/ckpt-3\n"
    "4/4 - 0s - loss: 0.6822 - accuracy: 0.5547 - 41ms/epoch - 10ms/step\n")


@pytest.mark.parametrize("chunk", [7, 64, len(EVALUATOR_LOG)])
def test_an_evaluators_rows_are_its_checkpoints_epochs(chunk):
    parser = EvaluationParser()
    assert parser.progress() == (None, "waiting for a checkpoint")
    for at in range(0, len(EVALUATOR_LOG), chunk):
        parser.feed(EVALUATOR_LOG[at:at + chunk])
    # ckpt-k is ModelCheckpoint's "ckpt-{epoch}" after epoch k (1-based): Keras's epoch k-1.
    assert parser.history() == [{"epoch": 1, "loss": 0.6901, "accuracy": 0.5312},
                                {"epoch": 2, "loss": 0.6822, "accuracy": 0.5547}]
    assert parser.progress() == (None, "checkpoint 3, 2 evaluated")
    counted = EvaluationParser()  # no checkpoint lines (a script that set the logger's level): in order
    counted.feed("".join(line + "\n" for line in EVALUATOR_LOG.splitlines() if "INFO" not in line))
    assert [row["epoch"] for row in counted.history()] == [0, 1]
    bars = EvaluationParser()  # a script's own evaluate(verbose=1): only the finished bar counts
    bars.feed("1/4 [======>.......] - ETA: 0s - loss: 0.9000 - accuracy: 0.2\r"
              "4/4 [==============] - 0s 8ms/step - loss: 0.6822 - accuracy: 0.5547\n")
    assert bars.history() == [{"epoch": 0, "loss": 0.6822, "accuracy": 0.5547}]


def test_only_an_evaluator_shows_sidecar_evaluator_lines():
    probe = ("import logging, kwnb.task.sidecar as s\n"
             "print(s.show_evaluator_progress())\n"
             "log = logging.getLogger('tensorflow')\n"
             "log.addHandler(logging.StreamHandler(__import__('sys').stdout))\n"
             "log.info('Evaluation starts: Model weights loaded from latest checkpoint file /c/ckpt-1')\n"
             "log.info('Creating a strategy')\n"
             "log.info('No checkpoints appear to be found after 30 seconds.')\n"
             "log.warning('a warning')\n")
    root = str(Path(kwnb.__file__).parents[1])

    def output(task_type):
        env = {"PYTHONPATH": root, "TF_CONFIG": json.dumps({"cluster": {}, "task": {"type": task_type, "index": 0}})}
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                              check=True).stdout.splitlines()

    assert output("evaluator") == ["True", "Evaluation starts: Model weights loaded from latest checkpoint file "
                                           "/c/ckpt-1", "a warning"]
    assert output("worker") == ["False", "a warning"]
    assert sidecar.task_type({"TF_CONFIG": "not json"}) == ""
    assert logging.getLogger("tensorflow").filters == []  # this process is not a task


# ----- a real run -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_chief_job_with_a_sidecar_evaluator(tmp_path):
    """MultiWorkerMirroredStrategy on chief + 1 worker, tf-keras fit with ModelCheckpoint, and a
    SidecarEvaluator reading the checkpoints: the tutorials' _is_chief takes its chief branch, and the
    evaluator's metrics reach the overlaid curves. It reads checkpoints until the last (max_evaluations=3),
    however late it starts on a loaded machine (35-57 s to its first evaluation here, with other runs
    beside it): its grace period is long enough for that, and the grace path itself is tested above."""
    checkpoints = tmp_path / "ckpt"
    run = kwnb.launch(SCRIPTS / "roles_fit.py", 1, name="roles", chief=True, evaluator=True, evaluator_grace=300,
                      args=[str(checkpoints), "3"], runs_dir=tmp_path / "runs", cwd=tmp_path)
    assert run.wait(timeout=400) and run.done, run.summary()
    chief, worker, evaluator = run.workers
    assert run.status == "finished", run.summary()
    assert (chief.status, worker.status, evaluator.status) == ("finished", "finished", "finished"), run.summary()
    assert "chief:0 is_chief=True" in run.logs("chief:0") and "worker:0 is_chief=False" in run.logs("worker:0")
    assert "evaluator: cluster has ['chief', 'worker']" in run.logs("evaluator:0")
    assert [row["epoch"] for row in run.history()] == [0, 1, 2]  # the run's curves are the chief task's
    evaluated = run.history("evaluator:0")
    assert all(row["epoch"] in (0, 1, 2) and "loss" in row and "accuracy" in row for row in evaluated)
    assert evaluated[-1]["epoch"] == 2 and evaluator.metrics.checkpoint == 3  # placed by the checkpoint it read
    assert sorted(path.name for path in checkpoints.glob("ckpt-*.index")) == \
        ["ckpt-1.index", "ckpt-2.index", "ckpt-3.index"]
    panels = curve_lines(run_series(run))
    assert [line[0] for line in panels["loss"]] == ["roles", "evaluator 0 (checkpoints)"]
    assert pictures_ready(run) and run.curves_path is not None and run.diagnoses == []
    assert "evaluator 0: finished exit 0" in run.summary() and "evaluations, last: loss" in run.summary()
    from kwnb.notebook.dashboard import Dashboard
    from kwnb.notebook.overview import badge
    from kwnb.notebook.overview import overview_html

    board = Dashboard(run)
    board._thread.join(10)
    assert list(board.tabs.titles) == ["chief 0: finished", "worker 0: finished", "evaluator 0: finished"]
    rows = overview_html(run.snapshot(), [], badge).split("<tr>")[2:]
    assert [row.split("<td>")[1].split("<")[0] for row in rows] == ["chief 0", "worker 0", "evaluator 0"]
    assert board.curves.value  # drawn, the evaluator's line among the chief's


@pytest.mark.slow
def test_a_parameter_server_job_with_a_chief_task_ends_with_no_diagnosis(tmp_path):
    """Kubeflow's dist_mnist pattern: the chief task coordinates ParameterServerStrategy, the worker and the
    ps only serve (they never log a join) and are stopped after the chief. It succeeded, and said once that
    the chief exited normally before joining (waiting_for_peers)."""
    run = kwnb.launch(SCRIPTS / "ps_chief_fit.py", 1, name="ps_chief", chief=True, ps=1, network="host",
                      runs_dir=tmp_path / "runs", cwd=tmp_path)
    assert run.wait(timeout=400) and run.done, run.summary()
    assert run.status == "finished" and "chief done" in run.logs("chief:0"), run.summary()
    assert [row["epoch"] for row in run.history()] == [0, 1]  # the chief's fit
    assert run.diagnoses == [] and run.diagnosis_history == [], run.summary()
    assert not any("notebook coordinates" in note for note in run.notes), run.notes
    # The worker and the ps served from their start to their end: never joining (the chief coordinates).
    served = {str(task.id): [phase for _, phase in task.vitals.phases] for task in run.workers[1:]}
    assert all("serving" in phases and "joining" not in phases for phases in served.values()), served


# ----- which task is the chief ---------------------------------------------------------------------

def test_the_chief_is_a_chief_task_else_worker_0_else_the_coordinator():
    assert roles.chief_position(plan_tasks(2)) == 0  # worker 0, under MultiWorkerMirroredStrategy
    assert roles.chief_position(plan_tasks(2, chief=True, evaluator=True)) == 0
    assert roles.chief_position(plan_tasks(1, ps=1, chief=True)) == 0  # the chief task, beside ps tasks too
    assert roles.chief_position(plan_tasks(2, ps=1)) is None  # the notebook, ParameterServerStrategy's coordinator
    assert roles.chief_position([TaskId("worker", 1), TaskId("chief", 0)]) == 1  # by name, not by place


def test_a_reopened_chief_and_ps_run_has_the_chief_the_live_one_had(tmp_path):
    """`--chief --ps`: the chief task is the chief (a notebook coordinates only without one). A past run
    whose folder lacks its result (the kernel ended first) took the notebook for the chief here."""
    import shutil

    run = launch_roles(tmp_path, "ps=0.1", n=1, chief=True, ps=1, name="chief_ps")
    assert run.wait(timeout=40) and run.done
    live = [(task.name, task.is_chief) for task in run.snapshot().tasks]
    assert live == [("chief:0", True), ("worker:0", False), ("ps:0", False)]
    cut_off = Path(shutil.copytree(run.dir, tmp_path / "cut_off"))
    description = json.loads((cut_off / "run.json").read_text())
    del description["result"]
    (cut_off / "run.json").write_text(json.dumps(description))
    for folder in (run.dir, cut_off):
        past = kwnb.open_run(folder)
        assert [(task.name, task.is_chief) for task in past.snapshot().tasks] == live, folder
        assert "chief 0" in overview_lines(past)[2] and "(chief)" not in "".join(overview_lines(past))
