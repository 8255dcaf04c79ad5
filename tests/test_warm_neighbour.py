"""The warm pool as a good neighbour (issue 38): after a 64-task run of a script that imports no
TensorFlow, on this machine's own limits, the pool keeps at most 4 interpreters (2 per CPU here),
under 1.5 GB together, and none of them has imported TensorFlow (it kept 33, 1.56 GB, each with
TensorFlow, before). Real processes: their memory and libraries are read from /proc."""
from __future__ import annotations

import psutil
import pytest

import kwnb
from kwnb.backends.warm import POOL
from kwnb.machine.limits import read_limits
from waiting import pool_ready


@pytest.fixture
def warm_session(monkeypatch, eager_pool):
    monkeypatch.setenv("KWNB_WARM", "1")  # as in a user's kernel (tests/conftest.py turns it off)
    yield  # the pool emptied, refilling at once at the kernel's priority: what, not when (tests/conftest.py)


def loaded(pid: int) -> bool:
    """TensorFlow's shared libraries are mapped into the process: it has imported TensorFlow."""
    with open(f"/proc/{pid}/maps") as maps:
        return "tensorflow" in maps.read()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_after_a_64_task_run_without_tensorflow_the_pool_is_small_and_bare(tmp_path, warm_session, capsys):
    script = tmp_path / "light.py"
    script.write_text("import json\nprint(json.dumps({'light': True}))\n")
    run = kwnb.launch(script, n=64, runs_dir=tmp_path / "runs", cwd=tmp_path, network="host", warm=True)
    assert set(run.wait(420)) == {0}, run.summary()
    cpus = read_limits().cpus
    expected = max(2, int(2 * cpus))  # 2 per CPU, at least 2: memory for 60 MB tasks is no limit here
    assert pool_ready(expected, timeout=120), (POOL.status(), POOL.refused)
    idle = POOL.status()
    assert len(idle) == expected and (len(idle) <= 4 or cpus > 2), (idle, POOL.cap_text())
    assert POOL.refused.startswith(f"{len(idle)} of the 64 wanted kept: at most {len(idle)}, by the CPUs"), POOL.refused
    rss = sum(psutil.Process(w["pid"]).memory_info().rss for w in idle)
    assert rss < 1.5e9 and rss < len(idle) * 60e6, rss  # a bare bootstrap each (about 10-30 MB here)
    assert [w["imports"] for w in idle] == [()] * len(idle)
    assert not any(loaded(w["pid"]) for w in idle), [w["pid"] for w in idle]

    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "kwnb")  # (its warm first cell adds nothing: the pool has its run already)
    capsys.readouterr()
    shell.run_line_magic("kw_pool", "")
    said = capsys.readouterr().out  # the cap and why, why it is not full, what each interpreter imported
    assert f"kwnb: pool cap at most {len(idle)}, by the CPUs: {len(idle)} for the" in said, said
    assert f"kwnb: {len(idle)} of the 64 wanted kept" in said and said.count("ready, imported nothing") == len(idle), said
