"""A shared import (kwnb/backends/shared_import.py, kwnb/task/forker.py): a run's tasks forked from one interpreter
that imported TensorFlow once. What a task sees and what it trains are a cold start's; its pid and its exit code
reach the engine although the kernel is not its parent; a signal before its fork cancels it; a SIGKILLed kernel
leaves neither the forker nor a task behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

import kwnb
from kwnb.backends import shared_import, warm_room
from kwnb.backends.base import TaskLaunch
from kwnb.backends.local import LocalProcess
from kwnb.task.tf_config import TaskId
from test_warm import keras_of, seen

ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).parent / "scripts" / "warm_probe.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_forked_task_sees_and_trains_what_a_cold_one_does(tmp_path, monkeypatch):
    monkeypatch.setenv(shared_import.SHARED_IMPORT_ENV, "0")
    cold = kwnb.launch(PROBE, n=2, name="cold", runs_dir=tmp_path / "runs", cwd=tmp_path, network="host")
    assert cold.wait(150) == [0, 0], cold.summary()
    monkeypatch.setenv(shared_import.SHARED_IMPORT_ENV, "1")
    forked = kwnb.launch(PROBE, n=2, name="forked", runs_dir=tmp_path / "runs", cwd=tmp_path, network="host",
                         args=["3"])
    assert forked.wait(150) == [3, 3], forked.summary()  # each exit code, from the forker that reaped the task
    assert all(task.pid for task in forked.workers)
    for position in (0, 1):
        before, after = seen(cold, position), seen(forked, position)
        assert after["tf_already"] and not before["tf_already"]
        different = {k for k in before if before[k] != after[k]} - {"tf_already", "tf_config", "argv", "cwd"}
        assert not different, {k: (before[k], after[k]) for k in different}
        assert after["argv"][1:] == ["3"] and after["nice"] == 0 and not after["parent_env"]
        assert after["stdin_tty_or_null"] == "/dev/null" and after["name"] == "__main__"
        assert keras_of(forked, position).startswith("tf_keras.") and keras_of(cold, position).startswith("tf_keras.")
    assert [row["loss"] for row in forked.history()] == [row["loss"] for row in cold.history()]


def test_what_is_shared():
    script = str(PROBE)

    def launches(n, **env):
        return [TaskLaunch(TaskId("worker", i), sys.executable, script, [], {"PATH": "/bin", "KWNB_WORKER": str(i),
                                                                             **env}, "/", Path("/tmp/x.log"))
                for i in range(n)]

    assert shared_import.shareable(launches(2)) == warm_room.WARM_IMPORTS
    assert shared_import.shareable(launches(1)) == ()  # nothing to share
    assert shared_import.shareable(launches(2, KERAS_BACKEND="jax")) == warm_room.WARM_IMPORTS  # (it imports no jax)
    different = launches(2)
    different[1].env["TF_CPP_MIN_LOG_LEVEL"] = "3"  # read at import: one import cannot serve both
    assert shared_import.shareable(different) == ()
    no_tensorflow = [TaskLaunch(t.task, t.python, __file__, [], t.env, t.cwd, t.log_path) for t in launches(2)]
    assert shared_import.shareable(no_tensorflow) == ()


@pytest.mark.parametrize("imports, env, shared", [
    # Keras on JAX: jax and keras imported, no backend initialized (each task's initialize() does it after the fork)
    ("import keras\nimport tensorflow as tf\n", {"KERAS_BACKEND": "jax"}, ("jax", "keras", "tensorflow")),
    ("import keras\n", {"KERAS_BACKEND": "jax"}, ("jax", "keras")),
    ("import jax\n", {"KERAS_BACKEND": "jax"}, ("jax", "keras")),
    # Keras 3 on TensorFlow: keras too, unless the script chooses Keras' backend (read when keras is imported)
    ("import keras\n", {}, ("tensorflow", "tf_keras", "keras")),
    ("import keras\n", {"KERAS_BACKEND": "tensorflow"}, ("tensorflow", "tf_keras", "keras")),
    ("import keras\n", {"KERAS_BACKEND": "torch"}, ("tensorflow", "tf_keras")),
    ("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n", {"TF_USE_LEGACY_KERAS": "1"},
     ("tensorflow", "tf_keras")),
    ("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n", {}, ()),  # TensorFlow would import Keras 3
    ("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n", {"KERAS_BACKEND": "jax"}, ("jax",)),
    ("import numpy\n", {"KERAS_BACKEND": "jax"}, ()),  # nothing of a framework to share
    # JAX's settings set by the script: jax reads them at import, so the task's own import must
    ("import os\nos.environ['JAX_ENABLE_X64'] = '1'\nimport jax\n", {"KERAS_BACKEND": "jax"}, ()),
    ("import os\nos.environ.setdefault('JAX_PLATFORMS', 'cpu')\nimport keras\n", {"KERAS_BACKEND": "jax"}, ()),
    ("from os import environ\nenviron.update(JAX_ENABLE_X64='1')\nimport jax\n", {"KERAS_BACKEND": "jax"}, ()),
    ("import os\nos.putenv('JAX_PLATFORMS', 'cpu')\nimport keras\n", {"KERAS_BACKEND": "jax"}, ()),
    # read, not set; or XLA_FLAGS, read when a backend is first initialized: shared
    ("import os\nprint(os.environ.get('JAX_PLATFORMS'))\nimport jax\n", {"KERAS_BACKEND": "jax"}, ("jax", "keras")),
    ("import os\nos.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=2'\nimport keras\n",
     {"KERAS_BACKEND": "jax"}, ("jax", "keras")),
])
def test_what_is_imported_before_the_fork(tmp_path, imports, env, shared):
    script = tmp_path / "main.py"
    script.write_text(imports)
    launches = [TaskLaunch(TaskId("worker", i), sys.executable, str(script), [], {"PATH": "/bin", **env}, "/",
                           tmp_path / f"{i}.log") for i in range(2)]
    assert shared_import.shareable(launches) == shared


def _launch(tmp_path: Path, index: int, code: str) -> TaskLaunch:
    script = tmp_path / f"task{index}.py"
    script.write_text(textwrap.dedent(code))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    return TaskLaunch(TaskId("worker", index), sys.executable, str(script), [], env, str(tmp_path),
                      tmp_path / f"worker-{index}.log")


def _forker(tmp_path: Path, import_seconds: float = 0.0) -> shared_import.SharedImport:
    """A forker that imports a module of the test's, which takes `import_seconds`."""
    (tmp_path / "slow_module.py").write_text(f"import sys, time\ntime.sleep({import_seconds})\n"
                                             "print('slow_module imported', file=sys.stderr, flush=True)\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    return shared_import.SharedImport(sys.executable, env, str(tmp_path), ("slow_module",))


def _wait(process: LocalProcess, seconds: float = 20) -> int | None:
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process.poll()


def test_exit_codes_signals_and_groups_reach_the_engine(tmp_path):
    forker = _forker(tmp_path)
    exits = LocalProcess(forker.fork(_launch(tmp_path, 0, "import slow_module, sys\nprint('ran', flush=True)\n"
                                                        "sys.exit(7)\n")))
    sleeps = LocalProcess(forker.fork(_launch(tmp_path, 1, """
        import subprocess, time
        child = subprocess.Popen(["sleep", "300"])
        print("child", child.pid, flush=True)
        time.sleep(300)
        """)))
    assert _wait(exits) == 7
    assert (tmp_path / "worker-0.log").read_text() == "slow_module imported\nran\n"  # the import's output first
    deadline = time.monotonic() + 20
    while "child" not in (tmp_path / "worker-1.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "worker-1.log").read_text().split("child ")[1].split()[0])
    assert os.getpgid(sleeps.pid) == sleeps.pid and os.getpgid(child) == sleeps.pid  # a group of its own
    assert psutil.Process(sleeps.pid).ppid() == forker.popen.pid
    sleeps.signal(signal.SIGKILL)
    assert sleeps.poll() == -signal.SIGKILL
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    forker.close(wait=5)
    assert forker.popen.returncode == 0


def test_a_signal_before_the_fork_cancels_the_task(tmp_path):
    forker = _forker(tmp_path, import_seconds=3)
    process = LocalProcess(forker.fork(_launch(tmp_path, 0, "open('started', 'w').close()\n")))
    time.sleep(0.5)
    assert process.pid is None and process.poll() is None and process.sample() is None  # still importing
    process.signal_task(signal.SIGUSR1)  # (stacks asked for before it exists: nothing to do)
    process.signal(signal.SIGKILL)
    assert process.poll() == -signal.SIGKILL
    time.sleep(3.5)
    assert not (tmp_path / "started").exists()
    forker.close(wait=5)


KERNEL = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from kwnb.backends import shared_import
from kwnb.backends.base import TaskLaunch
from kwnb.task.tf_config import TaskId
folder = Path({folder!r})
(folder / "task.py").write_text("import time\\ntime.sleep(300)\\n")
forker = shared_import.SharedImport(sys.executable, {{"PATH": "/usr/bin:/bin"}}, str(folder), ("json",))
handles = [forker.fork(TaskLaunch(TaskId("worker", i), sys.executable, str(folder / "task.py"), [],
                                  {{"PATH": "/usr/bin:/bin"}}, str(folder), folder / f"w{{i}}.log")) for i in (0, 1)]
while not all(h.pid for h in handles):
    time.sleep(0.05)
print("PIDS", forker.popen.pid, *[h.pid for h in handles], flush=True)
time.sleep(300)
"""


@pytest.mark.timeout(60)
def test_a_sigkilled_kernel_leaves_no_forker_nor_task_behind(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL.format(root=str(ROOT), folder=str(tmp_path))],
                              stdout=subprocess.PIPE, text=True)
    line = kernel.stdout.readline()
    pids = [int(pid) for pid in line.split()[1:]]
    assert len(pids) == 3 and all(psutil.pid_exists(pid) for pid in pids), line
    kernel.kill()
    kernel.wait()
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not left


NETWORK_PROBE = """
import os, sys, tensorflow
print("NET", os.readlink("/proc/self/ns/net"), os.getppid(), flush=True)
"""


def _network_of(run, position: int) -> tuple[str, int]:
    words = next(line for line in run.logs(position).splitlines() if line.startswith("NET ")).split()
    return words[1], int(words[2])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("usernet", ["slirp4netns", "pasta"])
def test_the_next_run_forks_from_the_kept_import_inside_its_own_network(tmp_path, monkeypatch, usernet):
    from kwnb.backends import netns
    if not netns.support().possible:
        pytest.skip(f"no private network here: {netns.support().forbidden_by}")
    monkeypatch.setenv(netns.USERNET_ENV, usernet)  # pasta's namespace has a user namespace of its own, to join too
    netns.support.cache_clear()
    if netns.support().tool != usernet:
        netns.support.cache_clear()
        pytest.skip(f"{usernet} is not installed (make system-deps installs it)")
    assert netns.support().user_namespace == (usernet == "pasta" or os.geteuid() != 0)
    monkeypatch.setattr(shared_import, "KEEP_SECONDS", 60.0)
    script = tmp_path / "network_probe.py"
    script.write_text(NETWORK_PROBE)
    options = dict(runs_dir=tmp_path / "runs", cwd=tmp_path, warm=False)
    first = kwnb.launch(script, n=2, name="first", network="host", **options)
    assert first.wait(150) == [0, 0], first.summary()
    second = kwnb.launch(script, n=2, name="second", network="private", **options)
    assert second.wait(150) == [0, 0], second.summary()
    host, ours = [_network_of(first, p) for p in (0, 1)], os.readlink("/proc/self/ns/net")
    private = [_network_of(second, p) for p in (0, 1)]
    forker = host[0][1]
    assert forker != os.getpid() and psutil.Process(forker).ppid() == os.getpid()  # kept: alive after both runs
    assert {parent for _, parent in host + private} == {forker}  # one import served both runs
    assert {net for net, _ in host} == {ours}
    assert len({net for net, _ in private}) == 1 and private[0][0] != ours  # both inside the run's own network
    netns.support.cache_clear()


def test_a_kept_forker_serves_its_environment_only_and_ends_after_its_time(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_import, "KEEP_SECONDS", 1.0)
    forker = _forker(tmp_path)
    shared_import.keep(forker)
    none = frozenset()  # nothing the runs must import themselves
    assert shared_import.take(forker.key, none) is forker and shared_import.take(forker.key, none) is None
    shared_import.keep(forker)  # (the caller's, then kept again)
    assert shared_import.take("another environment", none) is None
    assert forker.popen.wait(5) == 0  # ended: the runs have moved on
    later = _forker(tmp_path)
    shared_import.keep(later)
    assert later.popen.wait(5) == 0 and shared_import.take(later.key, none) is None  # its time is up


def test_a_kept_forker_serves_no_run_that_must_import_a_module_itself(tmp_path):
    """A run whose script sets KERAS_BACKEND must import keras itself: a forker that imported it for an earlier run
    (Keras 3 on TensorFlow) cannot serve it; it serves a run that does not import keras at all. (Two small modules
    stand in for TensorFlow and keras.)"""
    script = tmp_path / "main.py"
    script.write_text("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n")
    assert warm_room.held_back(str(script), {"TF_USE_LEGACY_KERAS": "1"}) == {"keras"}
    env = {"PATH": os.environ["PATH"]}
    both = shared_import.SharedImport(sys.executable, env, str(tmp_path), ("json", "csv"))
    shared_import.keep(both)
    assert shared_import.take(both.key, frozenset({"csv"})) is None
    assert both.popen.wait(5) == 0  # ended: it cannot serve that run
    again = shared_import.SharedImport(sys.executable, env, str(tmp_path), ("json", "csv"))
    shared_import.keep(again)
    assert shared_import.take(again.key, frozenset()) is again  # a run that holds nothing back: csv unused, harmless
    again.close()
    assert again.popen.wait(5) == 0


def test_only_a_task_run_by_the_interpreter_itself_is_served_by_a_process_started_ahead(tmp_path):
    from kwnb.backends import warm

    wrapper = tmp_path / "python-in-cgroup"  # as tests/test_training_faults.py's: it does something per task
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    launch = _launch(tmp_path, 0, "")
    assert warm.can_serve(launch)
    wrapped = _launch(tmp_path, 0, "")
    wrapped.argv = [sys.executable, "recorder.py", "task.jsonl", *wrapped.argv]  # a launcher that wraps it
    assert not warm.can_serve(wrapped)
    assert not warm.can_serve(TaskLaunch(launch.task, str(wrapper), launch.script, [], launch.env, launch.cwd,
                                         launch.log_path))


def test_a_task_that_cannot_enter_its_network_does_not_run_outside_it(tmp_path):
    forker = _forker(tmp_path)
    task = LocalProcess(forker.fork(_launch(tmp_path, 0, "open('ran', 'w').close()\n"),
                                    [str(tmp_path / "no-such-namespace")]))
    assert _wait(task) == 1
    assert "could not enter the run's private network" in (tmp_path / "worker-0.log").read_text()
    assert not (tmp_path / "ran").exists()
    forker.close(wait=5)


def test_kw_pool_shows_the_kept_import_and_stop_ends_it(tmp_path, monkeypatch, capsys):
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    monkeypatch.setattr(shared_import, "KEEP_SECONDS", 60.0)
    forker = _forker(tmp_path)
    shared_import.keep(forker)
    shell.run_line_magic("kw_pool", "")
    said = capsys.readouterr().out
    assert f"kept for the next run in the same environment: pid {forker.popen.pid}, slow_module, " in said
    assert "ends in 60 s" in said or "ends in 59 s" in said
    shell.run_line_magic("kw_pool", "--stop")
    assert "and the kept import" in capsys.readouterr().out
    assert forker.popen.wait(5) == 0 and shared_import.kept_status() is None
