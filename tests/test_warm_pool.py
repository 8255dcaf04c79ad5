"""The warm pool's races and sizing (kwnb/backends/warm.py, warm_room.py), without running TensorFlow
training: a stop() or a run that comes while a refill starts interpreters leaves nothing behind, and
the pool keeps to the session's CPUs and memory, and imports TensorFlow only for a script that does."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kwnb.backends import warm as warm_module
from kwnb.backends.base import TaskLaunch
from kwnb.backends import warm_room
from kwnb.backends.warm import Pool, key
from kwnb.machine.limits import Limits
from kwnb.task.tf_config import TaskId


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setattr(warm_room, "others_busy", lambda pids, limits, window=0: "")  # quiet: tested below
    made = Pool()
    yield made
    made.stop()


def wanted(pool: Pool, count: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KWNB_WARM"}
    pool._wanted = (key(sys.executable, env), sys.executable, env, os.getcwd(), count, False, warm_room.WARM_IMPORTS)


@pytest.mark.parametrize("interruption", ["stop", "run_started"])
def test_a_stop_or_a_run_during_a_refill_leaves_no_interpreter(pool, monkeypatch, interruption):
    """Fault injection: the interruption comes from another thread right after the refill started its
    first interpreter (today's refill added both afterwards, and they lived until the idle timer)."""
    started, original = [], Pool._start

    def start_then_interrupt(self, *args, **kwargs):
        warm = original(self, *args, **kwargs)
        if warm is not None:
            started.append(warm)
        if len(started) == 1:
            if interruption == "stop":
                self.stop()
            else:
                self.run_started(object())
        return warm

    monkeypatch.setattr(Pool, "_start", start_then_interrupt)
    wanted(pool, 2)
    pool.refill()
    assert pool.status() == [] and pool._idle == []
    assert len(started) == 1  # the second was never started: the pool had been stopped or a run began
    assert all(warm.popen.poll() is not None for warm in started)  # ended, not left running
    assert pool._folder is None  # its log folder went with the pool
    assert not any(p.info["cmdline"] and warm_module.WARM_SCRIPT in p.info["cmdline"]
                   and p.info["ppid"] == os.getpid() for p in psutil.process_iter(["cmdline", "ppid"]))


def limits(memory_gb: float, used_gb: float, cpus: float) -> Limits:
    return Limits(int(memory_gb * 2**30), "cgroup v1 memory.limit_in_bytes", int(used_gb * 2**30), cpus,
                  "cgroup v1 cpu.cfs_quota_us", None)


def test_the_cap_is_the_fewer_of_two_per_cpu_and_what_fits_in_memory():
    """A 1-CPU session with room for two is warm for a 2-worker run (issue 30: one per CPU left such a
    run half cold); a 2-CPU machine with room for 32 keeps 4, not one per task of a 64-task run (issue
    38: 33 idle interpreters, 1.56 GB)."""
    binder = warm_room.cap(limits(2, 0.3, 1))  # 1.7 GiB left: two tasks of 730 MB and 250 MB spare
    assert binder.count == 2, binder.why
    assert binder.why.startswith("at most 2, by the memory: memory for 2 training tasks of 696 MiB")
    assert "the CPUs allow 2 for the 1 CPU (cgroup v1 cpu.cfs_quota_us; 2 per CPU, at least 2)" in binder.why
    roomy = warm_room.cap(limits(24, 2, 2))
    assert (22 * 2**30 - warm_room.SPARE_MEMORY) // warm_room.TASK_MEMORY > 4 and roomy.count == 4, roomy.why
    assert roomy.why.startswith("at most 4, by the CPUs: 4 for the 2 CPUs (cgroup v1 cpu.cfs_quota_us;"), roomy.why
    assert "the memory has room for more: memory for 32 training tasks" in roomy.why
    assert warm_room.cap(limits(64, 2, 16)).count == 32
    light = warm_room.cap(limits(2, 1.5, 1), imports=())  # no TensorFlow: a task takes 60 MB, not 730
    assert light.count == 2 and "memory for 4 tasks without TensorFlow of 57 MiB" in light.why, light.why
    short = warm_room.cap(limits(2, 1.5, 4))  # 0.5 GiB left: not one training task with 250 MB spare
    assert short.count == 0 and "by the memory" in short.why and "cgroup v1 memory.limit_in_bytes" in short.why
    assert warm_room.cap(limits(2, 1.5, 4), pool_memory=1 << 30).count == 1  # the pool's own memory is its to use


def test_what_a_warm_interpreter_imports_is_read_from_the_script(tmp_path):
    """By `ast`, without running it: TensorFlow only for a script that imports it, itself or through a
    module next to it; no script yet (the first cell) or one that cannot be parsed: TensorFlow."""
    (tmp_path / "light.py").write_text("import json, os.path\nfrom numpy import linalg\nprint('tensorflow')\n")
    (tmp_path / "model.py").write_text("def build():\n    import tensorflow as tf\n    return tf\n")
    (tmp_path / "main.py").write_text("import json\nfrom model import build\n")
    (tmp_path / "k3.py").write_text("import keras\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "nets.py").write_text("from tensorflow import keras\n")
    (tmp_path / "deep.py").write_text("from pkg import nets\n")
    (tmp_path / "broken.py").write_text("import tensorflow as tf\ndef (\n")
    assert warm_room.script_imports(str(tmp_path / "light.py")) == {"json", "os", "numpy"}
    assert warm_room.warm_imports(str(tmp_path / "light.py")) == ()
    assert warm_room.warm_imports(str(tmp_path / "main.py")) == ("tensorflow", "tf_keras")
    assert warm_room.warm_imports(str(tmp_path / "k3.py")) == ("tensorflow", "tf_keras", "keras")
    assert warm_room.warm_imports(str(tmp_path / "deep.py")) == ("tensorflow", "tf_keras")  # pkg/nets.py does
    assert warm_room.warm_imports(str(tmp_path / "broken.py")) == ("tensorflow", "tf_keras")
    assert warm_room.warm_imports(None) == ("tensorflow", "tf_keras")
    assert warm_room.run_memory(str(tmp_path / "light.py"), 2) == 2 * warm_room.LIGHT_TASK_MEMORY
    assert warm_room.run_memory(str(tmp_path / "main.py"), 2) == 2 * warm_room.TASK_MEMORY


def test_busy_cpus_are_named_and_the_pool_waits(monkeypatch):
    """Other work on the machine (its CPU time growing by two CPUs a second, none of it the pool's)."""
    clock = {"busy": 0.0}

    def machine_busy():
        clock["busy"] += 2.0 * 0.05
        return clock["busy"]

    monkeypatch.setattr(warm_room, "_machine_busy", machine_busy)
    monkeypatch.setattr(warm_room, "_machine_running", lambda: 1)  # only the thread that looks
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 2)
    said = warm_room.others_busy([], limits(24, 2, 2), window=0.05)
    assert said == "other work uses 2.0 of this machine's 2 CPUs"
    monkeypatch.setattr(warm_room, "_machine_busy", lambda: 5.0)  # nothing else running
    assert warm_room.others_busy([], limits(24, 2, 2), window=0.05) == ""
    # Starved work: little CPU time, yet 3 threads waiting to run besides the one that looks.
    monkeypatch.setattr(warm_room, "_machine_running", lambda: 4)
    assert warm_room.others_busy([], limits(24, 2, 2), window=0.05) == "other work uses 3.0 of this machine's 2 CPUs"


def test_a_refill_waits_while_the_cpus_are_busy_and_a_stop_ends_the_wait(monkeypatch):
    monkeypatch.setattr(warm_room, "others_busy", lambda pids, limits, window=0: "other work uses 2.0 of 2 CPUs")
    monkeypatch.setattr(warm_module, "QUIET_RETRY", 0.05)
    pool = Pool()
    wanted(pool, 1)
    import threading
    refill = threading.Thread(target=pool.refill)
    refill.start()
    deadline = time.monotonic() + 10
    while "waiting for the CPUs" not in pool.refused and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.refused == "refill waiting for the CPUs to be quiet: other work uses 2.0 of 2 CPUs"
    assert pool.status() == []
    pool.stop()
    refill.join(10)
    assert not refill.is_alive() and pool.status() == []


def test_kw_pool_says_the_cap_and_why(monkeypatch, capsys):
    from IPython.testing.globalipapp import get_ipython

    from kwnb.backends.warm import POOL

    shell = get_ipython()
    shell.run_line_magic("load_ext", "kwnb")  # with KWNB_WARM=0 (tests/conftest.py): no pool prepared
    monkeypatch.setenv("KWNB_WARM", "1")
    monkeypatch.setenv("CPU_LIMIT", "1")
    monkeypatch.setenv("MEM_LIMIT", str(512 << 20))  # less than one training task and the spare
    monkeypatch.setattr(POOL, "cap_reason", "")  # no refill yet: what the limits allow now
    shell.run_line_magic("kw_pool", "")
    said = capsys.readouterr().out
    assert "kwnb: pool cap at most 0, by the memory: memory for 0 training tasks" in said
    assert "of 512 MiB, MEM_LIMIT" in said and "the CPUs allow 2 for the 1 CPU (CPU_LIMIT" in said


def test_a_warm_interpreter_that_imported_keras_serves_no_script_that_sets_keras_backend(pool, tmp_path):
    """Keras picks its backend when imported: an interpreter that imported it for the last run (Keras 3 on TensorFlow)
    would ignore a script's os.environ["KERAS_BACKEND"] = "jax". The pool gives such a script only one that did not."""
    env = {"PATH": os.environ["PATH"], "TF_USE_LEGACY_KERAS": "1"}  # kwnb's default: TensorFlow imports no Keras 3
    launch = TaskLaunch(TaskId("worker", 0), sys.executable, str(tmp_path / "main.py"), [], env, str(tmp_path),
                        tmp_path / "worker-0.log")
    waiting = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)  # stands in for one
    pool._idle = [warm_module.Warm(waiting, key(sys.executable, env), tmp_path / "warm.log",
                                   imports=("tensorflow", "tf_keras", "keras"))]
    (tmp_path / "main.py").write_text("import os\nos.environ['KERAS_BACKEND'] = 'jax'\nimport keras\n")
    assert warm_room.warm_imports(str(tmp_path / "main.py"), env) == ("tensorflow", "tf_keras")
    held = warm_room.held_back(str(tmp_path / "main.py"), env)
    assert held == {"keras"}
    assert pool.take(launch, held) is None
    assert pool.take(launch, frozenset()) is waiting  # a script that lets Keras choose
    assert waiting.wait(5) == 0  # given the task, its input closed
