"""kwnb/engine/readers/tf_messages.py against real TF 2.21 logs (tests/data/tf-2.21/, see its README.md)."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chunking import random_chunks

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "kwnb" / "engine" / "readers" / "tf_messages.py"
DATA = Path(__file__).parent / "data" / "tf-2.21"
USER_FILES = ("train.py", "keras3.py", "own_tf_config.py", "loop.py", "data_fit.py", "hog.py")  # the capture's scripts, matched by name


def _load():
    """The module by its package name, or by its path while kwnb/ is being restructured."""
    try:
        from kwnb.engine.readers import tf_messages
        return tf_messages
    except ImportError:
        spec = importlib.util.spec_from_file_location("tf_messages_under_test", MODULE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
        return module


def _capture_script():
    path = Path(__file__).parent / "scripts" / "capture_tf_logs.py"
    spec = importlib.util.spec_from_file_location("capture_tf_logs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tfm = _load()
TRAIN = _capture_script().TRAIN.splitlines()  # the script the captured tracebacks point into
TRAIN_LOOP = _capture_script().LOOP.splitlines()
LOGS = sorted(p.name for p in DATA.glob("*.log"))


def read(name: str) -> str:
    return (DATA / name).read_bytes().decode("utf-8")  # bytes: keep every \r


def scan(name: str, user_files=USER_FILES) -> list:
    return tfm.scan(read(name), user_files)


def of(events, cls) -> list:
    return [e for e in events if isinstance(e, cls)]


FAILURES = (tfm.PeerUnavailable, tfm.PythonTraceback, tfm.Unhealthy, tfm.BindFailure, tfm.Keras3PerReplica,
            tfm.InputExhausted, tfm.CollectiveMismatch)


def test_all_scenarios_captured():
    scenarios = {name.rsplit("-worker-", 1)[0] for name in LOGS}
    assert {"clean", "clean-chief-last", "waiting", "peer-killed", "peer-raises", "peer-stopped", "keras3",
            "own-tf-config", "port-taken", "uneven-steps", "shape-mismatch", "input-exhausted-fit",
            "input-exhausted-loop", "nan-loss", "out-of-memory", "not-distributed", "outside-scope", "diverging",
            "collective-ops-late", "no-estimator"} <= scenarios
    assert {"serving-roles-chief-0.log", "serving-roles-worker-0.log", "serving-roles-ps-0.log"} <= set(LOGS)


@pytest.mark.parametrize("name", LOGS)
def test_same_events_however_fed(name):
    text = read(name)
    whole = tfm.scan(text, USER_FILES)
    for pieces in ([*text], *(random_chunks(text, seed) for seed in range(3))):
        scanner = tfm.TfLogScanner(USER_FILES)
        fed = [event for piece in pieces for event in scanner.feed(piece)] + scanner.close()
        assert fed == whole
    # Tasks that trained alone, TensorFlow saying nothing of a cluster: a deleted TF_CONFIG, the Keras guide's
    # MirroredStrategy (whose worker 0 ended without an error)
    if not name.startswith(("not-distributed-", "shared-checkpoint-read-worker-0")):
        assert whole, "every capture shows at least the server start or an error"


def test_waiting_names_the_straggler():
    events = scan("waiting-worker-0.log")
    waits = of(events, tfm.WaitingForPeers)
    assert [(w.waiting, w.total) for w in waits] == [(1, 2), (1, 2)]
    assert waits[-1].stragglers == (("worker", 1),)
    assert "Example stragglers:" in waits[-1].lines[1] and waits[-1].lines[-1] == "/job:worker/replica:0/task:1"
    assert of(events, tfm.ServerStarted) and of(events, tfm.AgentConnected)
    assert not [e for e in events if isinstance(e, FAILURES)]


def test_waiting_for_the_chief_is_silent_after_the_server_starts():
    events = scan("waiting-for-chief-worker-1.log")
    assert [type(e) for e in events] == [tfm.ServerStarted]


@pytest.mark.parametrize("run", ["clean", "clean-chief-last"])
def test_clean_runs_join_and_raise_no_failure(run):
    chief, other = scan(f"{run}-worker-0.log"), scan(f"{run}-worker-1.log")
    assert of(chief, tfm.WaitingForPeers)[-1].waiting == 0  # everyone joined
    assert {e.task for e in of(chief, tfm.TaskConnected)} == {("worker", 0), ("worker", 1)}
    for events in (chief, other):
        assert of(events, tfm.ServerStarted) and of(events, tfm.AgentConnected)
    failures = [e for e in chief + other if isinstance(e, FAILURES)]
    if run == "clean":
        assert failures == []
    else:  # the chief outlived worker 1 by 15 s: the coordination service calls it unhealthy, harmlessly
        assert [(type(e), e.tasks) for e in failures] == [(tfm.Unhealthy, (("worker", 1),))]
        assert read("clean-chief-last-worker-0.log").rstrip().endswith("worker 0: done")


@pytest.mark.parametrize("name, peer", [("peer-killed-worker-0.log", 1), ("chief-killed-worker-1.log", 0),
                                        ("peer-raises-worker-0.log", 1)])
def test_survivor_reports_the_peer_unavailable(name, peer):
    events = scan(name)
    lost = of(events, tfm.PeerUnavailable)
    assert ("worker", peer) in {e.task for e in lost}
    assert {e.reason for e in lost} <= {"Connection reset by peer", "Socket closed", "Connection refused"}
    assert not of(events, tfm.Unhealthy)
    (tb,) = of(events, tfm.PythonTraceback)
    assert tb.short_type == "UnavailableError" and tb.message == "Graph execution error:"
    assert tb.user_frame.file.endswith("/train.py") and tb.user_frame.function == "<module>"
    assert TRAIN[tb.user_frame.line - 1].startswith("model.fit(")


def test_killed_peer_reset_by_peer():
    reset = of(scan("peer-killed-worker-0.log"), tfm.PeerUnavailable)
    assert {(e.reason, e.task, e.address) for e in reset} == {("Connection reset by peer", None, None),
                                                             ("Connection reset by peer", ("worker", 1), None)}


# Lines 26-28 of worker 0's log in an earlier peer-killed capture (README.md), where the survivor's error was
# "Connection refused" rather than "reset by peer": the only shape that names the peer's address.
REFUSED = """\
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling \
/tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_message:"failed to connect to all addresses; last error: UNKNOWN: \
ipv4:127.0.0.1:37273: Failed to connect to remote host: Connection refused", grpc_status:14}
E0000 00:00:1795460665.239396    8123 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort \
UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:37273: \
Failed to connect to remote host: Connection refused
"""


def test_refused_peer_gives_its_address():
    events = tfm.scan(REFUSED)
    assert [(e.reason, e.task, e.address, len(e.lines)) for e in events] == [
        ("Connection refused", ("worker", 1), "127.0.0.1:37273", 2),
        ("Connection refused", None, "127.0.0.1:37273", 1)]


def test_raising_peer_traceback_points_at_the_script_line():
    (tb,) = of(scan("peer-raises-worker-1.log", ["/tmp/kwnb-tf-capture/train.py"]), tfm.PythonTraceback)
    assert (tb.exc_type, tb.message) == ("ValueError", "bad batch 2 on worker 1")
    raise_line = 1 + next(i for i, line in enumerate(TRAIN) if "raise ValueError" in line)
    assert tb.user_frame == tfm.Frame("/tmp/kwnb-tf-capture/train.py", raise_line, "check_batch")
    assert str(tb.where) == f"train.py line {raise_line}, in check_batch"
    assert tb.lines[0] == "Traceback (most recent call last):"  # cut off the progress bar it was glued to
    assert [f.function for f in tb.frames] == ["<module>", "error_handler", "on_train_batch_end", "check_batch"]


def test_user_frame_is_not_the_innermost_one():
    (tb,) = of(scan("keras3-worker-1.log"), tfm.PythonTraceback)
    assert tb.frames[-1].file.endswith("constant_op.py")
    assert (Path(tb.where.file).name, tb.where.line) == ("keras3.py", 18)
    (anonymous,) = of(scan("keras3-worker-1.log", user_files=()), tfm.PythonTraceback)
    assert anonymous.user_frame is None and anonymous.where == anonymous.frames[-1]


def test_stopped_peer_is_unhealthy_then_unavailable():
    events = scan("peer-stopped-worker-0.log")
    (sick,) = of(events, tfm.Unhealthy)
    assert sick.tasks == (("worker", 1),) and "stopped sending heartbeats" in sick.lines[0]
    (tb,) = of(events, tfm.PythonTraceback)
    assert tb.short_type == "UnavailableError"
    assert events.index(sick) < events.index(tb)


@pytest.mark.parametrize("name", [n for n in LOGS if n.startswith("keras3")])
def test_keras3_per_replica(name):
    events = scan(name)
    (k3,) = of(events, tfm.Keras3PerReplica)
    assert "Attempt to convert a value (PerReplica:" in k3.lines[0]
    (tb,) = of(events, tfm.PythonTraceback)
    assert tb.exc_type == "ValueError" and Path(tb.where.file).name == "keras3.py"


def test_own_tf_config_fixed_ports():
    first, second = scan("own-tf-config-worker-0.log"), scan("own-tf-config-worker-1.log")
    assert [e.address for e in of(first, tfm.ServerStarted)] == ["localhost:12345"]  # not the port kwnb chose
    assert of(first, tfm.WaitingForPeers)[-1].stragglers == (("worker", 1),)
    (bind,) = of(second, tfm.BindFailure)
    assert (bind.address, bind.port) == ("0.0.0.0:12345", 12345)
    (tb,) = of(second, tfm.PythonTraceback)
    assert (tb.short_type, tb.message) == ("UnknownError", "Could not start gRPC server")
    assert Path(tb.where.file).name == "own_tf_config.py"


def test_port_taken():
    (bind,) = of(scan("port-taken-worker-0.log"), tfm.BindFailure)
    assert isinstance(bind.port, int) and "Failed to add port" in bind.lines[0]
    assert "Could not start gRPC server" in bind.lines[1]
    assert [type(e) for e in scan("port-taken-worker-1.log")] == [tfm.ServerStarted]  # then waits, silent


def test_uneven_steps_the_task_that_ran_longer_loses_its_peer():
    """Worker 1 ran 25 steps and exited 0; worker 0, at step 26 of 60, fails in the collective."""
    chief, early = scan("uneven-steps-worker-0.log"), scan("uneven-steps-worker-1.log")
    assert not [e for e in early if isinstance(e, FAILURES)]
    assert read("uneven-steps-worker-1.log").rstrip().endswith("worker 1: done")
    assert ("worker", 1) in {e.task for e in of(chief, tfm.PeerUnavailable)}
    (tb,) = of(chief, tfm.PythonTraceback)
    assert tb.short_type == "UnavailableError" and tb.where.function == "<module>"


def test_shape_mismatch_is_read_on_both_tasks():
    for index in (0, 1):
        events = scan(f"shape-mismatch-worker-{index}.log")
        (mismatch,) = of(events, tfm.CollectiveMismatch)
        assert mismatch.instance > 0 and "Shape mismatch in the collective instance" in mismatch.lines[0]
        (tb,) = of(events, tfm.PythonTraceback)
        assert tb.short_type == "InvalidArgumentError"
    (chief_tb,) = of(scan("shape-mismatch-worker-0.log"), tfm.PythonTraceback)
    assert chief_tb.where.function == "chief_only_summary"  # the chief's own path: its user frame says where
    (other_tb,) = of(scan("shape-mismatch-worker-1.log"), tfm.PythonTraceback)
    assert other_tb.where.function == "<module>" and other_tb.where.line != chief_tb.where.line


def test_type_mismatch_of_a_collective_instance_is_the_same_family():
    line = ("E0000 00:00:1795523386.576338    8580 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
            "INTERNAL: Collective instance 109 expected type 0 and data_type 1 but got type 1 and data_type 1\n")
    (mismatch,) = tfm.scan(line)
    assert isinstance(mismatch, tfm.CollectiveMismatch) and mismatch.instance == 109


def test_input_exhausted_in_fit_is_a_warning_glued_to_the_bar():
    for index in (0, 1):
        events = scan(f"input-exhausted-fit-worker-{index}.log")
        (exhausted,) = of(events, tfm.InputExhausted)
        # The bar Keras last drew (it redraws at most every 0.05 s), not necessarily the last step run.
        bar = re.findall(r"(\d+)/5 \[", exhausted.lines[0])[-1]
        assert (exhausted.source, exhausted.step, exhausted.steps) == ("keras", int(bar), 5)
        assert not of(events, tfm.PythonTraceback)  # fit returns; the task exits 0


def test_input_exhausted_in_a_custom_loop_is_end_of_sequence():
    events = scan("input-exhausted-loop-worker-0.log")
    (exhausted,) = of(events, tfm.InputExhausted)
    assert exhausted.source == "tf.data" and "End of sequence" in exhausted.lines[0]
    first, last = of(events, tfm.PythonTraceback)
    assert first.short_type == "OutOfRangeError" and last.short_type == "StopIteration"
    assert (last.where.function, TRAIN_LOOP[last.where.line - 1].strip()) == ("<module>", "loss = train_step(next(iterator))")


def test_nan_loss_and_oom_leave_no_tensorflow_message():
    """NaN is in the metrics (engine/readers/metrics.py), an OOM kill in the cgroup's counter: the log says neither."""
    for name in ("nan-loss-worker-0.log", "out-of-memory-worker-1.log"):
        assert not [e for e in scan(name) if isinstance(e, FAILURES)], name
    assert "loss: nan" in read("nan-loss-worker-0.log")


def test_a_custom_loop_that_prints_its_loss_tensor_as_nan_is_read_once():
    """The learner's `print("step", step, "loss", loss)`: no step count kwnb's curves read, so the scanner
    catches the line itself (the first only); no other capture prints a loss as NaN or infinite."""
    (event,) = of(scan("nan-loss-loop-worker-0.log"), tfm.NonFiniteLoss)
    assert (event.name, event.value) == ("loss", "NaN") and event.lines == ("step 1 loss tf.Tensor(nan, shape=(), dtype=float32)",)
    quiet = [n for n in LOGS if not n.startswith("nan-loss") and of(scan(n), tfm.NonFiniteLoss)]
    assert quiet == []
    names = [(e.name, e.value) for line in ("Step 3: loss = nan", "val_loss: -inf.", "loss: 0.5 - acc: nan",
                                 "loss has nan: tf.Tensor(False, shape=(), dtype=bool)", "loss of information",
                                 "Epoch 1: val_loss improved from inf to 0.69315, saving model to /tmp/best.keras",
                                 "mean loss is NaN!", "loss: [nan]")
             for e in of(tfm.scan(line + "\n"), tfm.NonFiniteLoss)]
    assert names == [("loss", "NaN"), ("val_loss", "infinite"), ("loss", "NaN"), ("loss", "NaN")]


def test_last_line_without_newline_is_read_at_close():
    line = next(l for l in read("waiting-worker-0.log").splitlines() if "tasks to connect." in l)
    scanner = tfm.TfLogScanner()
    assert scanner.feed(line) == []
    (event,) = scanner.close()
    assert (event.waiting, event.total) == (1, 2)


LEARNER = re.compile(r"worker \d: |TF_CONFIG set by the script|done$|Epoch \d+/\d+$")


def _lines(name: str) -> list[str]:
    return read(name).split("\n")  # physical lines, \r and \b kept, as the log file holds them


def test_runtime_shapes_are_folded():
    for line in ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
                 "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow "
                 "with the appropriate compiler flags.",
                 "/job:worker/replica:0/task:1",
                 "2024-01-01 10:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on."):
        assert tfm.is_runtime_line(line), line
    for line in ("", "worker 0: training", "Epoch 1/2", "/job:worker/replica:0/task:1 is mine", "I0000 is a word",
                 "\r1/5 [=====>....] - loss: 1.3816E0000 00:00:1795460698.841424    9379 ring_alg.cc:291] x"):
        assert not tfm.is_runtime_line(line), repr(line)


@pytest.mark.parametrize("name", LOGS)
def test_runtime_lines_fold_and_learner_lines_stay(name):
    lines = _lines(name)
    for line in lines:
        if re.match(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ ", line):
            assert tfm.is_runtime_line(line), line
        if LEARNER.match(line) or "\r" in line or "\b" in line:  # prints, Keras progress
            assert not tfm.is_runtime_line(line), repr(line)
    for tb in of(scan(name), tfm.PythonTraceback):  # errors stay visible
        header = next(l for l in lines if l.endswith(tb.lines[0]))
        for line in (header, *(l for l in tb.lines[1:] if l.startswith('  File "')), tb.lines[-1]):
            assert not tfm.is_runtime_line(line), line


@pytest.mark.parametrize("name", [n for n in LOGS if n.startswith(("clean-", "waiting"))])
def test_clean_logs_show_only_the_learner_once_folded(name):
    visible = [l for l in _lines(name) if l and not tfm.is_runtime_line(l)]
    assert visible and all(LEARNER.match(l) or "\r" in l for l in visible), visible


def _synthetic(lines: int, with_runtime: bool) -> tuple[str, int]:
    """A `lines`-line log of Keras progress and prints, with the clean chief's TF lines every 1000 lines."""
    bar = "\r 3/5 [=================>............] - ETA: 0s - loss: 1.3688 - accuracy: 1.2250" + "\b" * 80
    block = [bar + "\r 5/5 [==============================] - 0s 15ms/step - loss: 0.7079", "step done"] * 500
    runtime = [l for l in _lines("clean-worker-0.log") if tfm.is_runtime_line(l)] if with_runtime else []
    out, markers = [], 0
    while len(out) < lines:
        out += block + runtime
        markers += sum(1 for l in runtime if any(m in l for m in tfm.MARKERS))
    return "\n".join(out[:lines]) + "\n", markers


@pytest.mark.parametrize("with_runtime", [False, True])
def test_cost_per_100k_lines(with_runtime):
    """No wall-time assert: regex calls are counted; CPU seconds are printed (budget: 0.5 s per 100k lines)."""
    text, marker_lines = _synthetic(100_000, with_runtime)
    scanner = tfm.TfLogScanner(USER_FILES)
    started = time.process_time()
    events = [e for piece in (text[i:i + 65536] for i in range(0, len(text), 65536)) for e in scanner.feed(piece)]
    scan_cpu = time.process_time() - started
    started = time.process_time()
    folded = sum(map(tfm.is_runtime_line, text.split("\n")))
    fold_cpu = time.process_time() - started
    print(f"\n100k lines ({len(text) / 1e6:.1f} MB, {marker_lines} marker lines): scan {scan_cpu:.3f} s CPU, "
          f"is_runtime_line {fold_cpu:.3f} s CPU, stats {scanner.stats}")
    assert scanner.stats["lines"] <= marker_lines
    assert scanner.stats["regex"] <= 2 * marker_lines  # none at all for progress bars and prints
    assert (len(events) > 0) == with_runtime and (folded > 0) == with_runtime


def test_module_imports_only_the_standard_library():
    code = (
        # The engine's folder as a bare package: its modules load, kwnb/ and the engine's __init__ do not.
        "import importlib, sys, types\n"
        "before = set(sys.modules)\n"
        f"package = types.ModuleType('m'); package.__path__ = [{str(MODULE.parent)!r}]; sys.modules['m'] = package\n"
        "importlib.import_module('m.tf_messages')\n"
        "new = {n.split('.')[0] for n in set(sys.modules) - before} - {'m'}\n"
        "print(sorted(n for n in new if n not in sys.stdlib_module_names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----- the third tier (issue 29; tests/scripts/capture_tier3.py) -----------------------------------------------
def _tier3_script():
    sys.path.insert(0, str(Path(__file__).parent / "scripts"))  # it imports capture_tf_logs by name
    try:
        import capture_tier3
    finally:
        sys.path.pop(0)
    return capture_tier3


TIER3_FILES = ("unset_fit.py", "noscope_fit.py", "data_fit.py", "late_fit.py", "estimator_fit.py", "ps_chief_fit.py")


def test_a_task_that_deleted_its_tf_config_never_joins_and_trains_alone():
    """What not_distributed reads: no server, no join, in either log, while both print their epochs."""
    for index in (0, 1):
        assert scan(f"not-distributed-worker-{index}.log", TIER3_FILES) == []
        assert "Epoch 2/2" in read(f"not-distributed-worker-{index}.log")


@pytest.mark.parametrize("name", ["outside-scope", "diverging"])
def test_training_that_ran_wrong_joins_cleanly_and_tensorflow_says_nothing_of_it(name):
    """The model outside strategy.scope(), a runaway learning rate: a clean join and no failure; only the
    epoch values (engine/readers/metrics.py) show what went wrong."""
    chief = scan(f"{name}-worker-0.log", TIER3_FILES)
    assert of(chief, tfm.WaitingForPeers)[-1].waiting == 0 and of(chief, tfm.AgentConnected)
    assert not [e for e in chief + scan(f"{name}-worker-1.log", TIER3_FILES) if isinstance(e, FAILURES)]


@pytest.mark.parametrize("name, error, line", [
    ("collective-ops-late", "RuntimeError: Collective ops must be configured at program startup",
     "strategy = tf.distribute.MultiWorkerMirroredStrategy()"),
    ("no-estimator", "AttributeError: module 'tensorflow' has no attribute 'estimator'", "config = tf.estimator."),
])
def test_a_known_error_is_read_with_the_line_of_the_script(name, error, line):
    """known_errors.py explains these by their type and message; the frame is the line of the learner's script."""
    tier3 = _tier3_script()
    script = {"collective-ops-late": tier3.LATE_FIT, "no-estimator": tier3.ESTIMATOR_FIT}[name]
    for index in (0, 1):
        (tb,) = of(scan(f"{name}-worker-{index}.log", TIER3_FILES), tfm.PythonTraceback)
        assert f"{tb.short_type}: {tb.message}" == error
        assert script.splitlines()[tb.user_frame.line - 1].startswith(line)


def test_tasks_that_only_serve_start_their_server_and_never_join():
    """Kubeflow's dist_mnist pattern (--chief --ps 1): the worker and the ps log their server's start and nothing
    else of TensorFlow's, no join, no wait; kwnb must not read that as waiting for peers."""
    for role in ("worker", "ps"):
        assert [type(e) for e in scan(f"serving-roles-{role}-0.log", TIER3_FILES)] == [tfm.ServerStarted]
    chief = scan("serving-roles-chief-0.log", TIER3_FILES)
    assert not of(chief, tfm.WaitingForPeers) and not [e for e in chief if isinstance(e, FAILURES)]
    assert read("serving-roles-chief-0.log").rstrip().endswith("chief done")
