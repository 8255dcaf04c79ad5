"""Warm starts (kwnb/backends/warm.py): a re-run's tasks start in interpreters that have already
imported TensorFlow, and nothing but the start-up time tells them from cold ones."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import kwnb
from kwnb.backends import make_launcher
from kwnb.machine.task_env import temp_variables
from waiting import pool_ready
from kwnb.backends.shared_import import SHARED_IMPORT_ENV
from kwnb.backends.warm import POOL, key

SCRIPT = Path(__file__).parent / "scripts" / "warm_probe.py"


def seen(run, position):
    line = next(line for line in run.logs(position).splitlines() if line.startswith("SEEN "))
    return json.loads(line[5:])


def keras_of(run, position):
    """The module `from tensorflow.keras import layers` gave the task: tf-keras's under TF_USE_LEGACY_KERAS=1."""
    return next(line for line in run.logs(position).splitlines() if line.startswith("KERAS "))[6:]


@pytest.fixture
def empty_pool(eager_pool):
    return eager_pool  # (tests/conftest.py)


def test_the_key_ignores_only_what_differs_per_task():
    env = {"PATH": "/bin", "TF_CONFIG": "{}", "KWNB_WORKER": "0", "KWNB_RUN_DIR": "/a", "TF_USE_LEGACY_KERAS": "1"}
    same = {**env, "TF_CONFIG": '{"task": 1}', "KWNB_WORKER": "1", "KWNB_RUN_DIR": "/b"}
    assert key("/usr/bin/python3", env) == key("/usr/bin/python3", same)
    # pytest's name for the test that runs: a run in the next test forks from the import this one's made
    assert key("/usr/bin/python3", {**env, "PYTEST_CURRENT_TEST": "a.py::t (call)"}) == \
        key("/usr/bin/python3", {**env, "PYTEST_CURRENT_TEST": "a.py::u (call)"}) == key("/usr/bin/python3", env)
    assert key("/usr/bin/python3", {**env, "KWNB_RUNS_DIR": "/t/1"}) == key("/usr/bin/python3", env)  # kwnb's setting
    # read at import: `from tensorflow.keras import layers` gets Keras 3 from an interpreter that imported without it
    assert key("/usr/bin/python3", env) != key("/usr/bin/python3", {**env, "TF_USE_LEGACY_KERAS": "0"})
    assert key("/usr/bin/python3", env) != key("/usr/bin/python3", {**env, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert key("/usr/bin/python3", env) != key("/usr/bin/python3", {**env, "CUDA_VISIBLE_DEVICES": "0"})
    assert key("/usr/bin/python3", env) != key("/usr/local/bin/python3.11", env)


def test_cold_and_kwnb_warm_0_turn_it_off(monkeypatch):
    monkeypatch.delenv("KWNB_WARM", raising=False)  # (tests/conftest.py turns it off for the other tests)
    assert make_launcher("local").warm is True
    assert make_launcher("local", warm=False).warm is False
    monkeypatch.setenv("KWNB_WARM", "0")
    assert make_launcher("local").warm is False
    monkeypatch.setenv("KWNB_WARM", "1")
    assert make_launcher("local").warm is True


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("network", ["host", None])  # None: the default, private where it can be
def test_a_warm_rerun_is_the_same_run_only_sooner(tmp_path, empty_pool, network, monkeypatch):
    monkeypatch.setenv(SHARED_IMPORT_ENV, "0")  # cold: each task imports TensorFlow itself (not forked from one that did)
    cold = kwnb.launch(SCRIPT, n=2, name="same", runs_dir=tmp_path / "runs", cwd=tmp_path, network=network, warm=True)
    assert cold.wait(150) == [0, 0], cold.summary()
    assert not cold.warm and not any(seen(cold, i)["tf_already"] for i in (0, 1))
    assert pool_ready(2), (POOL.status(), POOL.refused)
    warm = kwnb.launch(SCRIPT, n=2, name="same", runs_dir=tmp_path / "runs", cwd=tmp_path, network=network, warm=True)
    assert warm.wait(150) == [0, 0], warm.summary()
    assert warm.warm and all(task.warm for task in warm.workers) and "started warm: 2 of 2" in warm.summary()
    for position in (0, 1):
        before, after = seen(cold, position), seen(warm, position)
        assert after["tf_already"] and not before["tf_already"]
        assert after["tf_config"]["task"] == before["tf_config"]["task"]
        different = {k for k in before if before[k] != after[k]} - {"tf_already", "tf_config"}
        assert not different, {k: (before[k], after[k]) for k in different}
        assert after["stdin_tty_or_null"] == "/dev/null" and after["name"] == "__main__"
        assert after["legacy"] == "1" and not after["parent_env"]
        assert keras_of(warm, position).startswith("tf_keras.") and keras_of(cold, position).startswith("tf_keras.")
    # Deterministic training (seeds, op determinism): the same per-epoch losses, warm or cold.
    assert [row["loss"] for row in warm.history()] == [row["loss"] for row in cold.history()]
    assert len(warm.history()) == 3
    assert warm.workers[0].vitals.time_in(warm.ended_at)["starting"] < \
        cold.workers[0].vitals.time_in(cold.ended_at)["starting"]
    if network == "host":  # (once: two more imports of TensorFlow, about 30 s beside the suite's other worker)
        assert pool_ready(2)  # refilled after the warm run
    folder = POOL._folder  # emptying the pool removes its log folder too
    POOL.stop()
    assert folder is not None and not folder.exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_another_environment_starts_cold_and_the_pool_follows_it(tmp_path, empty_pool):
    # The first run only has the pool filled for kwnb's default environment, which it does whatever the
    # run's script did: one that does nothing spares a TensorFlow start and fit (about 10 s of the test's 29).
    (tmp_path / "nothing.py").write_text("pass\n")
    first = kwnb.launch(tmp_path / "nothing.py", n=2, name="env", runs_dir=tmp_path / "runs", cwd=tmp_path,
                        network="host", warm=True)
    assert first.wait(150) == [0, 0]
    assert pool_ready(2)
    old_key = POOL.status()[0]["key"]
    other = kwnb.launch(SCRIPT, n=2, name="env", runs_dir=tmp_path / "runs", cwd=tmp_path, network="host",
                        env={"TF_CPP_MIN_LOG_LEVEL": "1"}, args="3", warm=True)
    assert other.wait(150) == [3, 3]  # exit codes pass through as from a cold start
    assert not other.warm  # read at import: a warm interpreter imported TensorFlow without it
    assert pool_ready(2)
    launched = {**other._engine._env(other.workers[0], {}), **dict(other.launcher._threads)}  # the launcher adds threads
    launched.update(temp_variables(launched))  # and the temporary folder
    assert {warm["key"] for warm in POOL.status()} == {key(other.python, launched)}
    assert POOL.status()[0]["key"] != old_key


@pytest.mark.slow
def test_no_pool_where_memory_is_short(tmp_path, empty_pool, monkeypatch):
    monkeypatch.setenv("MEM_LIMIT", str(512 << 20))  # JupyterHub's: less than one training task and the spare
    run = kwnb.launch(SCRIPT, n=1, name="short", runs_dir=tmp_path / "runs", cwd=tmp_path, network="host", warm=True)
    assert run.wait(150) == [0]
    deadline = time.monotonic() + 10
    while not POOL.refused and time.monotonic() < deadline:  # the refill runs in a thread of its own
        time.sleep(0.1)
    assert POOL.status() == [] and POOL.refused.startswith("no warm interpreters kept: at most 0, by the memory")
    assert "MEM_LIMIT" in POOL.refused and "MEM_LIMIT" in POOL.cap_reason


def test_an_unused_pool_leaves_no_folder():
    """The pool makes its log folder with its first interpreter and removes it when emptied."""
    from kwnb.backends.warm import Pool

    pool = Pool()
    assert pool._folder is None
    pool.stop()
    assert pool._folder is None
