"""The Slurm backend: the task side (TF_CONFIG from Slurm's variables) and whole runs on a real Slurm.

The task-side tests run the real bootstrap with the variables `srun` sets, so they run anywhere.
The run tests need the single-node Slurm that conftest.py starts (tests/slurm_support.py); where
none can be started they skip and say why.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kwnb
from kwnb.backends import LaunchError, make_launcher
from kwnb.backends.base import BOOTSTRAP
from kwnb.task import slurm_env
from kwnb.engine.live.run import Run, engine_of
from kwnb.notebook.overview import badge
from kwnb.notebook.overview import overview_html
from kwnb.slurm import SlurmLauncher, srun_exit_codes
from kwnb.pictures.outputs import pictures_ready
from waiting import wait_until

SCRIPTS = Path(__file__).parent / "scripts"
BEHAVE = SCRIPTS / "behave.py"


# ----- the task side, anywhere ---------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("vm", ["vm"]),
    ("node[01-03,07],login1", ["node01", "node02", "node03", "node07", "login1"]),
    ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
    ("a[9-11]", ["a9", "a10", "a11"]),
])
def test_host_lists_expand_as_slurm_writes_them(text, hosts):
    assert slurm_env.expand_hostlist(text) == hosts


def test_tasks_per_node_and_addresses_follow_block_distribution():
    assert slurm_env.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert slurm_env.addresses("n[1-2]", "2,1", 20000) == ["n1:20000", "n1:20001", "n2:20000"]
    with pytest.raises(ValueError, match="2 nodes"):
        slurm_env.addresses("n[1-2]", "3", 20000)


def test_tf_config_orders_task_types_as_tensorflow_does():
    tasks = [{"type": "worker", "index": 0}, {"type": "worker", "index": 1}, {"type": "ps", "index": 0}]
    config = slurm_env.tf_config(tasks, 2, ["a:1", "a:2", "b:1"])
    assert config == {"cluster": {"worker": ["a:1", "a:2"], "ps": ["b:1"]}, "task": {"type": "ps", "index": 0}}
    with pytest.raises(ValueError, match="Slurm started 2 tasks but kwnb planned 3"):
        slurm_env.tf_config(tasks, 0, ["a:1", "a:2"])


def _task_environment(tmp_path: Path, procid: int, **extra) -> dict[str, str]:
    tasks = [{"type": "worker", "index": i, "log": str(tmp_path / f"worker-{i}.log")} for i in range(2)]
    env = dict(os.environ, SLURM_PROCID=str(procid), SLURM_STEP_NODELIST="nodeA,nodeB",
               SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURMD_NODENAME=["nodeA", "nodeB"][procid],
               KWNB_SLURM_TASKS=json.dumps(tasks), KWNB_SLURM_PORT_BASE="23456", KWNB_RUN_DIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def test_bootstrap_becomes_the_slurm_task_it_was_started_as(tmp_path):
    """A task's output, TF_CONFIG, placement record and exit code, as the real bootstrap makes them."""
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint('TF_CONFIG', os.environ['TF_CONFIG'])\n"
                      "print('worker', os.environ['KWNB_WORKER'], file=sys.stderr)\nsys.exit(7)\n")
    result = subprocess.run([sys.executable, BOOTSTRAP, str(script)], env=_task_environment(tmp_path, 1),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 7
    assert result.stdout == "" and result.stderr == ""  # all of it went to the task's log
    log = (tmp_path / "worker-1.log").read_text()
    config = json.loads(log.split("TF_CONFIG ", 1)[1].splitlines()[0])
    assert config == {"cluster": {"worker": ["nodeA:23456", "nodeB:23456"]}, "task": {"type": "worker", "index": 1}}
    assert "worker 1" in log
    record = json.loads((tmp_path / "slurm-task-1.json").read_text())
    assert record["tf_config"] == config and record["host"] == "nodeB"
    assert (tmp_path / "slurm-exit-1").read_text() == "7"
    assert not (tmp_path / "worker-0.log").exists()


def test_bootstrap_records_an_uncaught_exception_as_exit_code_1(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('boom here')\n")
    result = subprocess.run([sys.executable, BOOTSTRAP, str(script)], env=_task_environment(tmp_path, 0),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert (tmp_path / "slurm-exit-0").read_text() == "1"
    assert "RuntimeError: boom here" in (tmp_path / "worker-0.log").read_text()


def test_bootstrap_refuses_a_placement_it_did_not_expect(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("print('should not run')\n")
    env = _task_environment(tmp_path, 1, SLURMD_NODENAME="nodeA")  # Slurm put task 1 on the first node
    result = subprocess.run([sys.executable, BOOTSTRAP, str(script)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0
    log = (tmp_path / "worker-1.log").read_text()
    assert "expected task 1 on nodeB" in log and "should not run" not in log


def test_a_task_ends_itself_when_kwnb_stops_following_the_job(tmp_path):
    """The heartbeat watchdog: a dead kernel must not leave a job holding nodes until its time limit."""
    heartbeat = tmp_path / "slurm-heartbeat"
    heartbeat.touch()
    script = tmp_path / "sleep.py"
    script.write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(60)\n")
    env = _task_environment(tmp_path, 0, KWNB_SLURM_HEARTBEAT=str(heartbeat), KWNB_SLURM_HEARTBEAT_STALE="2")
    process = subprocess.Popen([sys.executable, BOOTSTRAP, str(script)], env=env)
    try:
        log = tmp_path / "worker-0.log"
        assert wait_until(lambda: log.exists() and "sleeping" in log.read_text(), 30)
        for _ in range(8):  # kept fresh for 4 s: the task lives on
            os.utime(heartbeat)
            time.sleep(0.5)
        assert process.poll() is None
        assert process.wait(timeout=10) == -signal.SIGKILL  # then left alone: it ends itself
    finally:
        process.kill()
    assert "stopped following it" in (tmp_path / "worker-0.log").read_text()


def test_srun_reports_give_exit_codes_of_tasks_that_never_reached_python(tmp_path):
    output = tmp_path / "slurm-7.out"
    output.write_text("python: not found\nsrun: error: n1: tasks 0,2-3: Exited with exit code 127\n"
                      "srun: error: n2: task 1: Killed\nsrun: error: n2: task 4: Terminated\n")
    assert srun_exit_codes(output) == {0: 127, 2: 127, 3: 127, 1: -signal.SIGKILL, 4: -signal.SIGTERM}
    assert srun_exit_codes(tmp_path / "missing.out") == {}


# ----- options and errors, anywhere ----------------------------------------------------------------

def test_slurm_options_need_the_slurm_backend():
    with pytest.raises(ValueError, match="--partition, --sbatch-arg only apply with --backend slurm"):
        make_launcher("local", partition="debug", nodes=None, time=None, sbatch_args=["--mem=1G"])
    with pytest.raises(ValueError, match="backend must be one of local, slurm"):
        make_launcher("pbs")
    with pytest.raises(ValueError, match="--nodes must be 1 or more"):
        make_launcher("slurm", nodes=0)


def test_missing_sbatch_is_a_clear_error_before_anything_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    script = tmp_path / "main.py"
    script.write_text("print(1)\n")
    with pytest.raises(LaunchError, match="needs Slurm's sbatch, squeue, scancel on PATH"):
        Run(script, 2, runs_dir=tmp_path / "runs", launcher=SlurmLauncher())
    assert not (tmp_path / "runs").exists()


def test_magic_reports_missing_slurm_in_one_line(tmp_path, monkeypatch):
    from IPython.core.error import UsageError
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError, match="--backend slurm needs Slurm's"):
        shell.run_cell_magic("kw_worker", "main.py -n 2 --backend slurm", "print('hi')\n")
    with pytest.raises(UsageError, match="--time only apply with --backend slurm"):
        shell.run_cell_magic("kw_worker", "main.py -n 2 --time 10", "print('hi')\n")


# ----- whole runs on a real single-node Slurm ------------------------------------------------------

def slurm_run(tmp_path, script, n=2, args="", **launcher_options) -> Run:
    run = kwnb.launch(script, n, args=args, cwd=tmp_path, runs_dir=tmp_path / "runs",
                      launcher=SlurmLauncher(**launcher_options))
    return run


def test_keras_fit_trains_on_slurm_with_tf_config_from_slurm(slurm, tmp_path):
    """Two tasks of one sbatch job train a MultiWorkerMirroredStrategy model, followed like local workers."""
    script = tmp_path / "fit.py"
    script.write_text((SCRIPTS / "keras_fit.py").read_text())
    run = slurm_run(tmp_path, script, args="2", partition=slurm.partition, time="5", nodes=1)
    try:
        assert run.wait(timeout=240) == [0, 0], run.summary()
    finally:
        run.stop()
    assert run.status == "finished"
    hosts = [w.tf_config["cluster"]["worker"] for w in run.workers]
    assert hosts[0] == hosts[1] and len(set(hosts[0])) == 2  # one cluster, two distinct ports
    assert all(address.startswith(f"{slurm.node}:") for address in hosts[0])
    assert [w.tf_config["task"]["index"] for w in run.workers] == [0, 1]
    assert len(run.history()) == 3 and 0 <= run.history()[-1]["accuracy"] <= 1
    assert "DONE" in run.logs(0) and "DONE" in run.logs(1)
    job = run.launcher.jobs[0]
    assert f"job {job.id} on {slurm.node}" in run.chief.where
    assert (run.dir / "job.sh").read_text().count("srun --distribution=block") == 1
    assert pictures_ready(run) and (run.dir / "curves.png").exists()


def test_stop_cancels_the_job(slurm, tmp_path):
    run = slurm_run(tmp_path, BEHAVE, args="--sleep 120", partition=slurm.partition)
    try:
        assert wait_until(lambda: all("started" in run.logs(w.position) for w in run.workers), 60), run.summary()
        started = time.monotonic()
        codes = run.stop()
        assert time.monotonic() - started < 15
    finally:
        run.stop()
    assert run.status == "stopped" and codes == [-signal.SIGTERM] * 2
    job = run.launcher.jobs[0].id
    assert subprocess.run(["squeue", "-h", "-j", job, "-t", "RUNNING,PENDING"], capture_output=True,
                          text=True).stdout.strip() == ""


def test_a_failing_task_fails_the_run_with_its_exit_code(slurm, tmp_path):
    run = kwnb.launch(BEHAVE, 2, args="--sleep 120 --fail-index 1 --code 5", cwd=tmp_path, runs_dir=tmp_path / "runs",
                      failure_grace=1.0, launcher=SlurmLauncher(partition=slurm.partition))
    try:
        run.wait(timeout=90)
    finally:
        run.stop()
    assert run.status == "failed"
    assert run.exit_codes[1] == 5 and run.exit_codes[0] == -signal.SIGTERM
    assert "worker 1 failed with exit code 5" in run.reason
    assert "failing with exit code 5" in run.logs(1)


def test_a_queued_job_shows_pending_with_slurms_reason_and_can_be_cancelled(slurm, tmp_path):
    run = slurm_run(tmp_path, BEHAVE, args="--sleep 1", partition=slurm.partition,
                    sbatch_args=["--begin=now+300"])
    try:
        assert wait_until(lambda: run.status == "pending", 30), [w.status for w in run.workers]
        assert "pending (BeginTime)" in run.chief.where
        run.stop()
    finally:
        run.stop()
    assert run.status == "stopped" and run.done


def test_timeout_counts_from_the_tasks_start_not_from_the_queue(slurm, tmp_path):
    """--timeout 5 on a job Slurm holds for 8 s (sbatch --hold, then scontrol release): not stopped while it
    waits; stopped 5 s after its tasks started; the wait shown in the overview as pending."""
    run = kwnb.launch(BEHAVE, 2, args="--sleep 120", cwd=tmp_path, runs_dir=tmp_path / "runs", timeout=5,
                      launcher=SlurmLauncher(partition=slurm.partition, sbatch_args=["--hold"]))
    try:
        assert wait_until(lambda: run.status == "pending", 30), run.summary()
        time.sleep(8)  # past the timeout, all of it in the queue
        with engine_of(run).state_lock:
            held = overview_html(run.snapshot(), run.diagnoses, badge)
        assert run.status == "pending" and not run.timed_out and "(JobHeldUser)" in run.chief.where, run.summary()
        assert len(re.findall(r"<td>pending (\d+) s</td>", held)) == 2, held
        assert slurm.run("scontrol", "release", run.launcher.jobs[0].id).returncode == 0
        assert wait_until(lambda: all("started" in run.logs(w.position) for w in run.workers), 30), run.summary()
        run.wait(timeout=60)
    finally:
        run.stop()
    assert run.timed_out and run.status == "failed" and run.exit_codes == [-signal.SIGTERM] * 2, run.summary()
    assert re.fullmatch(r"timed out after 5 s of running, after \d+ s pending in the scheduler's queue", run.reason)
    for task in run.workers:  # by kwnb's own record of each task's phases
        spent = task.vitals.time_in(until=task.ended_at)
        assert spent["pending"] >= 8 and sum(spent.values()) - spent["pending"] >= 5, spent
    waited = re.findall(r"<td>stopped \((\d+) s pending\)</td>", overview_html(run.snapshot(), run.diagnoses, badge))
    assert len(waited) == 2 and all(int(seconds) >= 8 for seconds in waited), waited


def test_an_unknown_partition_is_rejected_with_the_partitions_there_are(slurm, tmp_path):
    with pytest.raises(LaunchError) as error:
        slurm_run(tmp_path, BEHAVE, partition="no-such-partition")
    assert "Slurm rejected the job" in str(error.value) and "partition" in str(error.value)
    assert slurm.partition in str(error.value)
    assert not any(str(tmp_path) in str(run.dir) for run in kwnb.runs())  # nothing kept, nothing to stop


def test_a_job_whose_tasks_exited_but_hang_in_shutdown_is_cancelled(slurm, tmp_path):
    """TensorFlow can hang at interpreter exit; the job must not hold its nodes until the time limit."""
    script = tmp_path / "hang_at_exit.py"
    script.write_text("import atexit, time\natexit.register(time.sleep, 300)\nprint('work done', flush=True)\n")
    run = slurm_run(tmp_path, script, partition=slurm.partition)
    try:
        assert run.wait(timeout=90) == [0, 0], run.summary()
    finally:
        run.stop()
    job = run.launcher.jobs[0].id
    assert any(f"Slurm job {job} was still RUNNING" in note and "cancelled" in note for note in run.notes), run.notes
    assert wait_until(lambda: subprocess.run(["squeue", "-h", "-j", job, "-t", "RUNNING,COMPLETING"],
                                             capture_output=True, text=True).stdout.strip() == "", 30)


def test_kill_and_restart_of_one_task_are_refused_under_slurm(slurm, tmp_path):
    run = slurm_run(tmp_path, BEHAVE, args="--sleep 60", partition=slurm.partition)
    try:
        for action in (run.kill, run.restart):
            with pytest.raises(RuntimeError, match="under --backend slurm"):
                action(1)
        assert run.exit_codes == [None, None]
    finally:
        run.stop()


def test_a_python_missing_on_the_nodes_fails_with_srun_s_words(slurm, tmp_path):
    """The interpreter exists here but not on the node (here: one that exits 127 as a missing one would)."""
    python = tmp_path / "python-elsewhere"
    python.write_text("#!/bin/sh\necho 'python-elsewhere: no Python on this node' >&2\nexit 127\n")
    python.chmod(0o755)
    run = kwnb.launch(BEHAVE, 2, python=str(python), cwd=tmp_path, runs_dir=tmp_path / "runs",
                      launcher=SlurmLauncher(partition=slurm.partition))
    try:
        run.wait(timeout=60)
    finally:
        run.stop()
    assert run.status == "failed" and run.exit_codes == [127, 127]
    assert any("no Python on this node" in note and "ended FAILED" in note for note in run.notes), run.notes


def test_the_terminal_runs_on_slurm_too(slurm, tmp_path, capsys):
    from kwnb import cli

    code = cli.main(["run", str(BEHAVE), "-n", "2", "--backend", "slurm", "--partition", slurm.partition,
                     "--args", "--sleep 0.5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[worker 0] worker 0 started" in out and "[worker 1] worker 1 started" in out
    assert "finished" in out
