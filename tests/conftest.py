"""tests/: warm starts are off unless a test asks for them (warm=True), so that no test's CPU is
shared with a pool importing TensorFlow in the background after another test's run; and the one
teardown that modules starting runs share."""
import os

import pytest

os.environ.setdefault("KWNB_WARM", "0")


@pytest.fixture
def stop_leftover_runs():
    """After the test, stop every run it left going (a failed assertion before its own stop): its
    workers would otherwise train on into the next test's CPU and time."""
    yield
    import kwnb

    for run in kwnb.runs():
        if not run.done:
            run.stop(reason="test teardown")


@pytest.fixture(scope="session")
def replayed(tmp_path_factory):
    """Every captured run the suite reads (tests/replay.py's SCENARIOS), replayed once for the session, all at once:
    a replay costs its captured time, not CPU, so together they take as long as the longest (about 10 s)."""
    from replay import SCENARIOS, replays

    started = replays(SCENARIOS, tmp_path_factory.mktemp("replayed"))
    yield started
    for run in started.values():
        run.stop()


@pytest.fixture(scope="module")
def ray_cluster():
    """The 3-node Ray cluster (tests/ray_support.py) of the one module that uses it, tests/test_ray.py, stopped by pid
    when that module ends, not the session: idle, its daemons took about 1.3 CPU-s every 30 s (docs/testing.md),
    some 40 CPU-s over the rest of a `make test` worker's files; or a skip saying why."""
    import subprocess

    import ray_support

    try:
        cluster = ray_support.start()
    except ray_support.RayUnavailable as error:
        pytest.skip(str(error))
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"the test Ray cluster could not be started: {type(error).__name__}: {error}")
    yield cluster
    ray_support.stop(cluster)


@pytest.fixture
def eager_pool(monkeypatch):
    """The warm pool, emptied, refilling at once and at the kernel's priority: for tests of what a warm start
    gives, not of when the pool refills (tests/test_warm_pool.py) nor of its nice 19 (tests/test_warm_cgroup.py).
    At nice 19 beside the suite's other worker training on both CPUs, importing TensorFlow took over 90 s."""
    from kwnb.backends import warm, warm_room

    monkeypatch.setattr(warm_room, "BUSY_SHARE", float("inf"))
    monkeypatch.setattr(warm, "NICE", 0)
    warm.POOL.stop()
    yield warm.POOL
    warm.POOL.stop()



@pytest.fixture(autouse=True)
def no_tensorflow_stub_left():
    """`kwnb run` in a test's own process (kwnb.cli.main) switches the whole process to TensorBoard's TensorFlow stub
    (readers/tensorboard_import.use_tensorflow_stub); undone after each test, or every later test's tf.summary in that
    pytest-xdist worker gets the stub ("cannot import tensorflow 2.0 API": test_tensorboard.py's tests failed)."""
    import sys

    had = "tensorboard.compat.notf" in sys.modules
    yield
    if not had:
        sys.modules.pop("tensorboard.compat.notf", None)
