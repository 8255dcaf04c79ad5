"""Faults with real processes: taken ports, preemption and resume, missing TensorFlow, hostile output."""
import socket
from pathlib import Path

import psutil
import pytest

import kwnb
from kwnb.backends.local import LocalLauncher
from kwnb.pictures.outputs import pictures_ready

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch, stop_leftover_runs):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))


class PortThief(LocalLauncher):
    """Chooses free ports like the local launcher, then another socket takes the first one in the moment between
    the launcher letting go of the ports it held and the worker binding it: the race a real busy machine can
    still produce (another program's bind, not another picker's)."""

    def __init__(self):
        # This machine's network: in a private one the thief's socket could not clash with the worker.
        super().__init__(network="host", warm=False)
        self.stolen = []

    def _release_ports(self):
        ports = self._held.ports if self._held is not None else []
        super()._release_ports()
        if ports and not self.stolen:
            thief = socket.socket()
            thief.bind(("localhost", ports[0]))
            thief.listen()
            self.stolen.append(thief)
            self.taken_port = thief.getsockname()[1]


@pytest.mark.slow
def test_a_taken_port_relaunches_the_cluster_on_new_ports():
    thief = PortThief()
    run = kwnb.launch(SCRIPTS / "keras_fit.py", n=2, args="2", launcher=thief)
    try:
        assert run.wait(timeout=120) == [0, 0]
    finally:
        thief.stolen[0].close()
    assert run.port_retries == 1 and run.restarts == 0
    assert any("could not bind" in note for note in run.notes)
    assert f"localhost:{thief.taken_port}" not in run.workers[0].tf_config["cluster"]["worker"]
    log = run.workers[0].log_path.read_text()
    assert "Could not start gRPC server" in log and "new ports, try 2" in log
    assert [row["epoch"] for row in run.history()] == [0, 1, 2]
    # Said while it happened (port_taken), withdrawn once the relaunched cluster trained: no false alarm left.
    taken = [d for d in run.diagnosis_history if d.kind == "port_taken"]
    assert taken and f"{thief.taken_port}" in taken[0].message and run.diagnoses == []


@pytest.mark.slow
def test_preempted_worker_restarts_the_cluster_and_fit_resumes(tmp_path):
    run = kwnb.launch(SCRIPTS / "preempted_fit.py", n=2, on_failure="restart", max_restarts=2,
                      args=[str(tmp_path / "backup"), str(tmp_path / "preempted")])
    assert run.wait(timeout=180) == [0, 0], run.summary()
    assert run.restarts == 1 and run.workers[1].restarts == 1 and run.status == "finished"
    chief_log = run.workers[0].log_path.read_text()
    first, second = chief_log.split("===== kwnb: restart 1 of the cluster")
    assert "Epoch 2/4" in first and "Epoch 3/4" not in first
    # BackupAndRestore: the second attempt starts after the last finished epoch, not at epoch 1.
    assert "Epoch 1/4" not in second and "Epoch 3/4" in second and "training complete" in second
    assert [row["epoch"] for row in run.history()] == [0, 1, 2, 3]
    # The restarted attempt starts again (its first attempt's epochs are kept, but say nothing of it): it trains
    # once it has joined, never before (issue 32: it read "training" while it imported TensorFlow).
    for task in run.workers:
        phases = [phase for _, phase in task.vitals.phases]
        attempts = "|".join(phases).split("|starting|")
        assert len(attempts) == 2 and all("training|joining" not in attempt for attempt in attempts), phases
    chief_again = "starting|" + "|".join([p for _, p in run.workers[0].vitals.phases]).split("|starting|")[1]
    assert chief_again.startswith("starting|joining|training"), chief_again
    # The kill is said as what it was, recovered from; not a fault of this ok run, in every view.
    assert [(d.kind, d.task, d.recovered) for d in run.diagnoses] == [("killed", 1, True)], run.summary()
    said = run.diagnoses[0].message
    assert said == "worker 1 was killed by SIGKILL from outside kwnb, then recovered (restart 1 of 2)", said
    pictures_ready(run)
    for summary in (run.summary(), (run.dir / "summary.txt").read_text(), kwnb.open_run(run.dir).summary()):
        assert "diagnoses:" not in summary and "peak memory" not in summary.split("recovered:")[1], summary
        assert "recovered:\n  - killed: worker 1 was killed by SIGKILL from outside kwnb, then recovered" in summary


def test_tensorflow_missing_in_the_workers_python_is_shown_plainly(tmp_path):
    bare = tmp_path / "bare"
    import venv

    venv.EnvBuilder(with_pip=False).create(bare)
    script = tmp_path / "needs_tf.py"
    script.write_text("import tensorflow as tf\n")
    run = kwnb.launch(script, n=2, python=str(bare / "bin" / "python"), failure_grace=1)
    assert run.wait(timeout=60) == [1, 1]
    assert run.status == "failed"
    assert "ModuleNotFoundError: No module named 'tensorflow'" in run.summary()


def test_non_utf8_output_is_shown_not_fatal(tmp_path):
    script = tmp_path / "latin.py"
    script.write_text("import sys\nsys.stdout.buffer.write(b'caf\\xe9 \\xff\\xfe bytes\\n')\nprint('after')\n")
    run = kwnb.launch(script, n=1)
    assert run.wait(timeout=30) == [0]
    assert run.workers[0].screen.tail() == ["caf\ufffd \ufffd\ufffd bytes", "after"]


def test_a_flood_of_lines_neither_blocks_nor_loses_a_line(tmp_path):
    lines = 1_000_000
    script = tmp_path / "flood.py"
    script.write_text(f"for i in range({lines}):\n    print('line', i)\n")
    kernel = psutil.Process()
    before = kernel.memory_info().rss
    run = kwnb.launch(script, n=1)
    assert run.wait(timeout=180) == [0]
    grown_mb = (kernel.memory_info().rss - before) / 2**20
    for worker in run.workers:
        text = worker.log_path.read_text().splitlines()
        assert text[0] == "line 0" and text[-1] == f"line {lines - 1}" and len(text) == lines
        assert worker.screen.total_lines == lines and worker.screen.tail(1) == [f"line {lines - 1}"]
    assert grown_mb < 50, f"kernel memory grew {grown_mb:.0f} MB"


def test_log_folder_and_files_are_private(tmp_path):
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    run = kwnb.launch(script, n=1)
    run.wait(timeout=30)
    assert run.dir.stat().st_mode & 0o777 == 0o700
    assert run.workers[0].log_path.stat().st_mode & 0o777 == 0o600


def test_output_written_just_before_exit_is_read_to_the_end(tmp_path):
    """More than two reads' worth (4 MiB each) written in one burst right before exiting."""
    script = tmp_path / "burst.py"
    script.write_text("import sys\nsys.stdout.write(('x' * 99 + '\\n') * 250_000)\nprint('THE END')\n")
    run = kwnb.launch(script, n=1)
    assert run.wait(timeout=60) == [0]
    assert run.workers[0].screen.total_lines == 250_001
    assert run.workers[0].screen.tail(1) == ["THE END"]
