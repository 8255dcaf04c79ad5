"""TensorBoard: curves from real event files (tf.summary, the tf-keras callback), and %kw_tensorboard
with a real TensorBoard process on 127.0.0.1.

Event files are written by real TensorFlow: tf.summary in this process, tf-keras model.fit in a
subprocess. Expected values come from what was written (or from Keras's History), never from the
reader under test.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

import kwnb
from kwnb.engine.readers.metrics import MetricsParser
from kwnb.engine.readers.tensorboard import TensorBoardScalars, event_folders, metric_of, writer_of

pytest.importorskip("tensorboard", reason="tensorboard is not installed (the tf extra brings it)")
HOUR = 3600.0


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


class Writer:
    """A real tf.summary file writer in a folder; `write` adds scalars and flushes them to disk."""

    def __init__(self, tf, folder: Path):
        self.tf, self.writer = tf, tf.summary.create_file_writer(str(folder))

    def write(self, *points: tuple[str, int, float]) -> None:
        with self.writer.as_default():
            for tag, step, value in points:
                self.tf.summary.scalar(tag, value, step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def f32(value: float) -> float:
    return float(np.float32(value))  # what an event file holds


# ----- which tags become which rows ----------------------------------------------------------------
@pytest.mark.parametrize("folder, tag, expected", [
    ("train", "epoch_loss", ("epoch", "loss")),
    ("validation", "epoch_accuracy", ("epoch", "val_accuracy")),
    ("train", "batch_loss", ("batch", "loss")),
    ("logs", "loss", ("step", "loss")),
    ("validation", "val_loss", ("step", "val_loss")),
    ("validation", "evaluation_loss_vs_iterations", None),
    ("logs", "epoch_", ("step", "epoch_")),
])
def test_tag_rules(folder, tag, expected):
    assert metric_of(folder, tag) == expected


# ----- reading event files incrementally ----------------------------------------------------------
def test_custom_loop_summaries_are_read_incrementally(tf, tmp_path):
    since = time.time()
    writer = Writer(tf, tmp_path / "logs")
    writer.write(("loss", 1, 0.9), ("loss", 2, 0.8), ("loss", 3, 0.7))
    reader = TensorBoardScalars([tmp_path], since)
    epochs, steps = reader.poll()
    assert epochs == []
    assert steps == [{"epoch": 0, "step": s, "loss": f32(v)} for s, v in ((1, 0.9), (2, 0.8), (3, 0.7))]
    assert reader.poll() == ([], [])  # nothing new: nothing again

    writer.write(("epoch_loss", 0, 0.8), ("epoch_accuracy", 0, 0.5), ("loss", 4, 0.6), ("loss", 5, 0.5))
    epochs, steps = reader.poll()
    assert epochs == [{"epoch": 0, "loss": f32(0.8), "accuracy": f32(0.5)}]
    assert steps == [{"epoch": 1, "step": 4, "loss": f32(0.6)}, {"epoch": 1, "step": 5, "loss": f32(0.5)}]
    assert reader.steps_per_epoch == 3  # steps 1..3 came before epoch 0 ended
    writer.close()
    assert reader.poll(rescan=True) == ([], [])


def test_a_folder_created_later_is_found_on_the_next_scan(tf, tmp_path):
    since = time.time()
    Writer(tf, tmp_path / "a").write(("epoch_loss", 0, 1.0))
    reader = TensorBoardScalars([tmp_path], since)
    assert [row["epoch"] for row in reader.poll()[0]] == [0]
    Writer(tf, tmp_path / "b").write(("epoch_loss", 1, 0.5))
    assert reader.poll(rescan=True)[0] == [{"epoch": 1, "loss": f32(0.5)}]


def test_workertemp_folders_are_ignored(tf, tmp_path):
    """tf-keras makes non-chief workers write into workertemp_<i> (and deletes it): the chief's curves only."""
    since = time.time()
    Writer(tf, tmp_path / "logs" / "train").write(("epoch_loss", 0, 0.5))
    Writer(tf, tmp_path / "logs" / "workertemp_1" / "train").write(("epoch_loss", 0, 9.0), ("epoch_loss", 1, 9.0))
    assert TensorBoardScalars([tmp_path], since).poll() == ([{"epoch": 0, "loss": f32(0.5)}], [])
    assert event_folders([tmp_path], since) == [tmp_path / "logs" / "train"]


def test_an_earlier_runs_files_are_not_read_even_in_the_same_folder(tf, tmp_path):
    old = Writer(tf, tmp_path / "logs")
    old.write(("epoch_loss", 0, 5.0), ("epoch_loss", 1, 4.0))
    old.close()
    Writer(tf, tmp_path / "old_run").write(("epoch_loss", 0, 7.0))
    for path in [*(tmp_path / "logs").iterdir(), *(tmp_path / "old_run").iterdir()]:
        os.utime(path, (time.time() - HOUR, time.time() - HOUR))  # as an earlier run leaves them
    since = time.time()
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 2, 0.25))  # the new run resumes at epoch 2
    assert TensorBoardScalars([tmp_path], since).poll() == ([{"epoch": 2, "loss": f32(0.25)}], [])


def test_two_writers_in_one_folder_give_one_curve(tf, tmp_path):
    since = time.time()
    first, second = Writer(tf, tmp_path / "logs"), Writer(tf, tmp_path / "logs")
    first.write(("loss", 1, 0.5), ("loss", 2, 0.4))
    second.write(("loss", 1, 0.5), ("loss", 2, 0.4), ("loss", 3, 0.3))
    _, steps = TensorBoardScalars([tmp_path], since).poll()
    assert [row["step"] for row in steps] == [1, 2, 3]


def test_only_the_runs_own_processes_files_are_read_where_the_writers_are_known(tf, tmp_path):
    """Another notebook's run in the same folder writes its event files there meanwhile (notebook 02's custom loop
    beside notebook 01's fit gave the fit's curve two more epochs): TF2 names each file after its writer's host and
    pid, and a local run's reader takes only its tasks' processes' files. Files another host wrote, or whose name
    says no pid, are read as before."""
    since = time.time()
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 0, 0.5))  # written by this process
    [written] = list((tmp_path / "logs").iterdir())
    assert writer_of(written) == (socket.gethostname(), os.getpid())
    assert TensorBoardScalars([tmp_path], since, writers=lambda: {os.getpid() + 1}).poll() == ([], [])
    assert TensorBoardScalars([tmp_path], since, writers=lambda: {os.getpid()}).poll()[0] == [{"epoch": 0, "loss": f32(0.5)}]
    assert TensorBoardScalars([tmp_path], since).poll()[0] == [{"epoch": 0, "loss": f32(0.5)}]  # writers unknown
    elsewhere = written.with_name(written.name.replace(f".{socket.gethostname()}.", ".node7.cluster."))
    written.rename(elsewhere)
    assert writer_of(elsewhere) == ("node7.cluster", os.getpid())
    assert TensorBoardScalars([tmp_path], since, writers=lambda: {1}).poll()[0] == [{"epoch": 0, "loss": f32(0.5)}]
    assert writer_of(Path("events.out.tfevents.1795790135.vm")) is None  # TF1's names say no pid


def test_run_folder_and_explicit_logdir_are_roots_and_each_file_is_read_once(tf, tmp_path):
    since = time.time()
    Writer(tf, tmp_path / "run").write(("epoch_loss", 0, 0.5))
    Writer(tf, tmp_path / "cwd" / "tb").write(("epoch_accuracy", 0, 0.75))
    reader = TensorBoardScalars([tmp_path / "run", tmp_path / "cwd", tmp_path / "cwd" / "tb"], since)
    assert reader.poll() == ([{"epoch": 0, "loss": f32(0.5), "accuracy": f32(0.75)}], [])


KERAS_FIT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int64")
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    # verbose=1: tf-keras calls the callback's batch hooks (update_freq) only when another callback needs them.
    history = model.fit(x, y, batch_size=32, epochs=2, validation_data=(x[:64], y[:64]), verbose=1,
                        callbacks=[tf.keras.callbacks.TensorBoard(sys.argv[1], update_freq=1)])
    print(json.dumps(history.history))
""")


@pytest.fixture(scope="module")
def keras_logs(tmp_path_factory):
    """A real tf-keras model.fit with the TensorBoard callback: 2 epochs of 4 batches, with validation."""
    folder = tmp_path_factory.mktemp("keras")
    since = time.time()
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1"}
    done = subprocess.run([sys.executable, "-c", KERAS_FIT, str(folder / "logs")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, since, json.loads(done.stdout.strip().splitlines()[-1])


def test_keras_callback_gives_the_histories_epochs(keras_logs):
    folder, since, history = keras_logs
    epochs, _ = TensorBoardScalars([folder], since).poll()
    assert [row["epoch"] for row in epochs] == [0, 1]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [row[key] for row in epochs] == pytest.approx(history[key], rel=1e-6), key
    assert not any(key.startswith("evaluation") for row in epochs for key in row)


def test_keras_callback_batches_are_step_rows_within_their_epochs(keras_logs):
    folder, since, history = keras_logs
    reader = TensorBoardScalars([folder], since)
    _, steps = reader.poll()
    assert [(row["epoch"], row["step"]) for row in steps] == [(0, 1), (0, 2), (0, 3), (0, 4),
                                                              (1, 5), (1, 6), (1, 7), (1, 8)]
    # The running mean at an epoch's last batch is the epoch's value.
    assert [steps[3]["loss"], steps[7]["loss"]] == pytest.approx(history["loss"], rel=1e-6)
    assert reader.steps_per_epoch == 4
    halved = TensorBoardScalars([folder], since, batch_scale=0.5).poll()[1]
    assert [row["loss"] for row in halved] == pytest.approx([row["loss"] / 2 for row in steps])


def test_rows_merge_into_the_parsers_history_as_reported_rows(keras_logs):
    folder, since, history = keras_logs
    reader = TensorBoardScalars([folder], since)
    parser = MetricsParser()
    parser.feed("Epoch: 0, accuracy: 0.1, train_loss: 9.0.\n")
    epochs, steps = reader.poll()
    parser.feed_rows(epochs, steps, steps_per_epoch=reader.steps_per_epoch)
    parser.feed("Epoch: 1, accuracy: 0.2, train_loss: 8.0.\n")  # parsed after: the event file's values still win
    assert [row["accuracy"] for row in parser.history()] == pytest.approx(history["accuracy"], rel=1e-6)
    assert [row["train_loss"] for row in parser.history()] == [9.0, 8.0]
    assert [row["step"] for row in parser.steps] == list(range(1, 9))
    assert parser.steps_per_epoch == 4


def test_without_tensorboard_nothing_is_read_and_it_says_why(tf, tmp_path):
    since = time.time()
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 0, 0.5))
    code = ("import sys; sys.modules['tensorboard'] = None\n"
            "from kwnb.engine.readers.tensorboard import TensorBoardScalars\n"
            f"reader = TensorBoardScalars([{str(tmp_path)!r}], {since!r})\n"
            "print(reader.poll(), reader.poll(), reader.unavailable)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("([], []) ([], []) cannot read TensorBoard event files")


def test_reading_event_files_in_a_kernel_writes_no_tensorflow_start_up_lines(tf, tmp_path):
    """The first read imports TensorFlow in the reading process (a kernel): its C++ start-up lines (absl's
    warning, CUDA drivers, CPU instructions) went to descriptor 2, which ipykernel forwards into the running
    cell as red stderr (issue 29). Descriptor 2 is back afterwards, and the environment untouched."""
    since = time.time()
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 0, 0.5))
    code = ("import os, sys\n"
            "from kwnb.engine.readers.tensorboard import TensorBoardScalars\n"
            f"reader = TensorBoardScalars([{str(tmp_path)!r}], {since!r})\n"
            "epochs, _ = reader.poll(rescan=True)\n"
            "os.write(2, b'descriptor 2 is back\\n')\n"
            "print('tensorflow' in sys.modules, [row['loss'] for row in epochs], os.environ.get('TF_CPP_MIN_LOG_LEVEL'))")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.stdout.strip() == "True [0.5] None", result.stderr
    assert result.stderr == "descriptor 2 is back\n"


SLOW_READER_IMPORT = textwrap.dedent("""
    import json, os, sys, time
    folder, since, gate = sys.argv[1], float(sys.argv[2]), sys.argv[3]

    class Gate:  # TensorBoard's reader cannot be imported until the gate file exists: a slow import, held open
        def find_spec(self, name, path=None, target=None):
            while name == "tensorboard.backend.event_processing.event_accumulator" and not os.path.exists(gate):
                time.sleep(0.02)
            return None

    sys.meta_path.insert(0, Gate())
    from kwnb.engine.readers.tensorboard import TensorBoardScalars
    from kwnb.engine.readers.tensorboard_import import use_tensorflow_stub
    use_tensorflow_stub()
    reader, notes = TensorBoardScalars([folder], since), []
    ticks = [reader.poll_safely(notes.append) for _ in range(3)]  # the supervisor's, while the reader is imported
    open(gate, "w").close()
    last = reader.poll_safely(notes.append, rescan=True)  # the last look, when the tasks have ended, waits for it
    print(json.dumps([ticks, last[0], notes]))
""")


def test_the_supervisor_does_not_wait_while_the_reader_is_imported(tf, tmp_path):
    """In a kernel the reader's first use imports TensorFlow: 3.6 s of wall time on the quiet machine, far more on a
    busy one. Done in the supervisor's thread, it froze the run's logs, statuses and memory samples for that long:
    a 2-worker run that trained for 8.5 s ended with no memory peak. Each tick returns while the import goes on
    (held open here until the gate file exists: without a thread of its own the first tick never returns)."""
    since = time.time()
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 0, 0.5), ("epoch_loss", 1, 0.25))
    gate = tmp_path / "gate"
    result = subprocess.run([sys.executable, "-c", SLOW_READER_IMPORT, str(tmp_path), repr(since), str(gate)],
                            capture_output=True, text=True, timeout=60)
    ticks, epochs, notes = json.loads(result.stdout.strip().splitlines()[-1])
    assert ticks == [[[], []]] * 3 and notes == []
    assert [row["loss"] for row in epochs] == [0.5, 0.25]


# ----- %kw_tensorboard ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ip():
    from kwnb.notebook.tensorboard_magic import TensorBoardMagics

    shell = start_ipython() or get_ipython()  # start_ipython gives the shell to its first caller only
    shell.run_line_magic("load_ext", "kwnb")
    shell.register_magics(TensorBoardMagics)  # until kwnb's load_ipython_extension registers it
    return shell


@pytest.fixture
def served(monkeypatch, tmp_path):
    from kwnb.notebook import tensorboard_magic

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("TENSORBOARD_BINARY", raising=False)
    yield tensorboard_magic
    for run in kwnb.runs():
        run.stop()
    tensorboard_magic.stop_all()


def _open(ip, line: str):
    from kwnb.notebook import tensorboard_magic

    try:
        ip.run_line_magic("kw_tensorboard", line)
    except UsageError as error:
        if "TensorBoard" in str(error):
            pytest.skip(f"TensorBoard cannot start here: {error}")
        raise
    return list(tensorboard_magic._started.values())[-1]


def _listening(pid: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.Process(pid).net_connections("inet") if c.status == psutil.CONN_LISTEN}


def _wait_gone(pid: int, port: int, seconds: float = 20) -> bool:
    import psutil

    deadline = time.monotonic() + seconds
    while True:
        try:
            gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            gone = True
        if gone and not _answers(port):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _kill_if_left(pid: int | None) -> None:
    """After a failed test: leave no TensorBoard behind."""
    import psutil

    try:
        process = psutil.Process(pid) if pid is not None else None
        if process is not None and "kwnb-tensorboard" in " ".join(process.cmdline()):  # not a reused pid
            process.kill()
    except psutil.Error:
        pass


def _answers(port: int) -> bool:
    from kwnb.notebook.tensorboard_magic import _answers as answers

    return answers(port)


def test_magic_serves_a_logdir_on_localhost_only_and_reuses_it(tf, ip, served, tmp_path, capsys, monkeypatch):
    Writer(tf, tmp_path / "logs").write(("epoch_loss", 0, 0.5))
    monkeypatch.setenv("TENSORBOARD_PROXY_URL", "/user/ada/proxy/%PORT%/")
    first = _open(ip, "--logdir logs")
    out = capsys.readouterr().out
    assert f"TensorBoard serves logs ({tmp_path / 'logs'}) at http://127.0.0.1:{first.port}/" in out
    assert f"through TENSORBOARD_PROXY_URL: /user/ada/proxy/{first.port}/" in out
    with urllib.request.urlopen(first.url, timeout=10) as page:
        assert page.status == 200
    tags = json.loads(urllib.request.urlopen(first.url + "data/plugin/scalars/tags", timeout=10).read())
    assert "epoch_loss" in tags["."]  # it reads the folder (a run named "." in TensorBoard's terms)
    assert _listening(first.pid) == {"127.0.0.1"}

    again = _open(ip, "--logdir logs")
    assert (again.pid, again.port) == (first.pid, first.port)
    assert "already serves" in capsys.readouterr().out

    served.stop_all()
    assert _wait_gone(first.pid, first.port)


def test_magic_on_a_run_opens_the_folder_its_event_files_are_in(tf, ip, served, tmp_path, capsys):
    old = tmp_path / "old_logs"
    Writer(tf, old).write(("epoch_loss", 0, 1.0))
    for path in old.iterdir():
        os.utime(path, (time.time() - HOUR, time.time() - HOUR))
    (tmp_path / "noop.py").write_text("print('hello')\n")
    run = kwnb.launch("noop.py", n=1)
    run.wait(60)
    with pytest.raises(UsageError, match="has written no TensorBoard event files yet"):
        ip.run_line_magic("kw_tensorboard", "noop")
    Writer(tf, tmp_path / "logs" / "train").write(("epoch_loss", 0, 0.5))
    Writer(tf, tmp_path / "logs" / "validation").write(("epoch_loss", 0, 0.6))
    opened = _open(ip, "noop")
    assert opened.logdir == tmp_path / "logs"
    assert "TensorBoard serves run 'noop'" in capsys.readouterr().out
    # A run folder (as from an earlier kernel) names the same logs, and TensorBoard is reused.
    again = _open(ip, str(run.dir))
    assert (again.logdir, again.pid) == (opened.logdir, opened.pid)
    assert "already serves" in capsys.readouterr().out


@pytest.mark.parametrize("line, message", [
    ("", "give a run name, or --logdir DIR"),
    ("--logdir no/such/folder", "no such folder"),
    ("nosuchrun", "no run named 'nosuchrun'"),
])
def test_magic_bad_input_is_one_line(ip, served, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("kw_tensorboard", line)


SERVE_THEN_WAIT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kwnb.notebook import tensorboard_magic
    served = tensorboard_magic.serve(Path(sys.argv[1]))
    print(served.pid, served.port, tensorboard_magic._launcher_dir, flush=True)
    time.sleep(600)
""")


def test_tensorboard_ends_when_its_kernel_is_killed(tmp_path):
    """SIGKILL runs no atexit handler: the watchdog inside TensorBoard must end it, and remove its launcher."""
    (tmp_path / "logs").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TENSORBOARD_BINARY"}
    kernel = subprocess.Popen([sys.executable, "-c", SERVE_THEN_WAIT, str(tmp_path / "logs")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        line = kernel.stdout.readline().split()
        if len(line) != 3:
            pytest.skip(f"TensorBoard cannot start here: {kernel.stderr.read()[-500:] if kernel.poll() else line}")
        pid, port, launcher = int(line[0]), int(line[1]), Path(line[2])
        assert _answers(port) and launcher.is_dir()
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
        assert _wait_gone(pid, port)
        assert not launcher.exists()
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        _kill_if_left(pid)


def test_tensorflow_stub_reads_the_same_rows_without_importing_tensorflow(keras_logs):
    folder, since, history = keras_logs
    code = ("import sys, json\n"
            "from kwnb.engine.readers.tensorboard import TensorBoardScalars\n"
            "from kwnb.engine.readers.tensorboard_import import use_tensorflow_stub\n"
            "assert use_tensorflow_stub()\n"
            f"epochs, steps = TensorBoardScalars([{str(folder)!r}], {since!r}).poll()\n"
            "print(json.dumps([epochs, len(steps), 'tensorflow' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    epochs, step_count, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert [row["loss"] for row in epochs] == pytest.approx(history["loss"], rel=1e-6)
    assert (step_count, imported) == (8, False)


KERNEL_CELL = textwrap.dedent("""
    from kwnb.notebook import tensorboard_magic
    get_ipython().register_magics(tensorboard_magic.TensorBoardMagics)  # until %load_ext kwnb does
    get_ipython().run_line_magic("kw_tensorboard", "--logdir logs")
    (served,) = tensorboard_magic._started.values()
    print("SERVED", served.pid, served.port, tensorboard_magic._launcher_dir)
""")


def test_tensorboard_stops_when_jupyter_shuts_the_kernel_down(tmp_path):
    """A real kernel, shut down as Jupyter does: kwnb's atexit handler must get to run and stop TensorBoard.

    ipykernel waits on children in its process group (zombies too) before exiting, and Jupyter kills
    it after 2.5 s; a TensorBoard left in that group kept the atexit handler from ever running."""
    from jupyter_client.manager import start_new_kernel

    (tmp_path / "logs").mkdir()
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    pid = None
    try:
        output = []
        client.execute_interactive(KERNEL_CELL, timeout=120,
                                   output_hook=lambda m: output.append(m["content"].get("text", "")))
        served = [line.split() for line in "".join(output).splitlines() if line.startswith("SERVED")]
        if not served:
            pytest.skip(f"TensorBoard cannot start here: {''.join(output)[-500:]}")
        pid, port, launcher = int(served[0][1]), int(served[0][2]), Path(served[0][3])
        assert _answers(port)
        client.stop_channels()
        manager.shutdown_kernel(now=False)
        assert _wait_gone(pid, port)
        assert not launcher.exists()  # removed by the atexit handler, which ran
        assert not Path(tempfile_info_dir(), f"pid-{pid}.info").exists()
    finally:
        if manager.is_alive():
            manager.shutdown_kernel(now=True)
        _kill_if_left(pid)


def tempfile_info_dir() -> str:
    from tensorboard import manager

    return manager._get_info_dir()
