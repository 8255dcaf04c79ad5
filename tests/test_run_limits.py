"""A local run within the session's limits (kwnb/backends/local.py, warm_room.py): TensorFlow's thread
pools share the CPUs the session may use among the run's tasks, and a run that will not fit in what is
left of the memory limit is told so in one line, then goes ahead. Light tasks: no TensorFlow."""
from __future__ import annotations

import json

import kwnb
from kwnb.notebook import overview

# Prints the thread variables it got. (It imports no TensorFlow, as its text says: a light task.)
PRINT_THREADS = """import json, os
print("THREADS " + json.dumps({k: os.environ.get(k) for k in
      ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "PJRT_NPROC")}), flush=True)
"""


def threads_seen(run, position):
    line = next(line for line in run.logs(position).splitlines() if line.startswith("THREADS "))
    return json.loads(line[8:])


def test_threads_are_shared_among_the_tasks_and_a_run_too_big_is_told_and_goes_ahead(tmp_path, monkeypatch):
    (tmp_path / "light.py").write_text(PRINT_THREADS)
    monkeypatch.setenv("CPU_LIMIT", "1")  # JupyterHub's: 1 CPU for 2 tasks
    monkeypatch.setenv("MEM_LIMIT", str(64 << 20))  # less than two light tasks take
    run = kwnb.launch(tmp_path / "light.py", n=2, runs_dir=tmp_path / "runs", cwd=tmp_path, network="host")
    assert run.wait(120) == [0, 0], run.summary()
    for position in (0, 1):
        # (inter-op threads: never fewer than 2, see kwnb/backends/local.py)
        assert threads_seen(run, position) == {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2",
                                               "OMP_NUM_THREADS": "1", "PJRT_NPROC": "1"}
    described = json.loads((run.dir / "run.json").read_text())["threads"]
    assert described["why"] == "1 CPU (CPU_LIMIT) shared by 2 tasks" and described["set"]["OMP_NUM_THREADS"] == "1"
    warnings = [note for note in run.notes if "may not fit in memory" in note]
    assert len(warnings) == 1 and "2 tasks need about 114 MiB" in warnings[0] and "(MEM_LIMIT)" in warnings[0]
    assert "goes ahead" in warnings[0]
    overview._limits[:] = [0.0, None]  # read afresh, not from another test's cache
    shown = overview.overview_html(run.snapshot(), [], badge=str)
    assert shown.count("<tr>") == 3 and " of 64 MiB (MEM_LIMIT)</div>" in shown  # the limit that applies


def test_the_users_thread_settings_win_and_a_run_that_fits_is_not_warned(tmp_path, monkeypatch):
    (tmp_path / "light.py").write_text(PRINT_THREADS)
    monkeypatch.setenv("CPU_LIMIT", "1")
    monkeypatch.delenv("MEM_LIMIT", raising=False)
    run = kwnb.launch(tmp_path / "light.py", n=3, runs_dir=tmp_path / "runs", cwd=tmp_path, network="host",
                      env={"OMP_NUM_THREADS": "3"})
    assert run.wait(120) == [0, 0, 0], run.summary()
    assert threads_seen(run, 2) == {"TF_NUM_INTRAOP_THREADS": None, "TF_NUM_INTEROP_THREADS": None,
                                    "OMP_NUM_THREADS": "3", "PJRT_NPROC": None}
    assert json.loads((run.dir / "run.json").read_text())["threads"]["set"] == {}
    assert not [note for note in run.notes if "may not fit" in note]
