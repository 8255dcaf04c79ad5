"""--gpus: which GPUs the session may use (machine/gpus.py), each task's share (machine/task_env.py),
and the environment real tasks receive.

This machine has no GPU: a stand-in `nvidia-smi` on PATH lists some, and plain-Python tasks print
the CUDA_VISIBLE_DEVICES and TF_FORCE_GPU_ALLOW_GROWTH they were started with. No TensorFlow
touches a device here (docs/gpus.md says what that leaves unverified).
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import kwnb
from kwnb.machine.task_env import GROWTH, Step, TaskFacts, added, place_gpus
from kwnb.machine.gpus import SESSION_VARIABLES, SessionGpus, listed_gpus, session_gpus, visible_devices
from kwnb.notebook.overview import overview_html

pytestmark = pytest.mark.usefixtures("stop_leftover_runs")

PRINT_ENV = ("import json, os\n"
             "print('KWNB-GPU ' + json.dumps({k: os.environ.get(k) for k in "
             "('CUDA_VISIBLE_DEVICES', 'TF_FORCE_GPU_ALLOW_GROWTH')}))\n")


@pytest.fixture
def gpus_listed(tmp_path, monkeypatch):
    """A stand-in nvidia-smi listing `count` GPUs, first on PATH, and a session that names none itself."""
    def install(count: int) -> None:
        folder = tmp_path / "bin"
        folder.mkdir(exist_ok=True)
        lines = "".join(f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: GPU-{i:08x}-0000-0000-0000-000000000000)\\n"
                        for i in range(count))
        script = folder / "nvidia-smi"
        script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 2\nprintf "{lines}"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    for name in (*SESSION_VARIABLES, GROWTH):
        monkeypatch.delenv(name, raising=False)
    return install


def seen_by_tasks(run) -> list[dict]:
    run.wait(timeout=60)
    assert run.exit_codes == [0] * len(run.workers), run.summary()
    seen = []
    for worker in run.workers:
        line = next(l for l in Path(worker.log_path).read_text().splitlines() if l.startswith("KWNB-GPU "))
        seen.append(json.loads(line.removeprefix("KWNB-GPU ")))
    return seen


def launch(tmp_path, n: int, **options):
    script = tmp_path / "print_env.py"
    script.write_text(PRINT_ENV)
    return kwnb.launch(script, n=n, runs_dir=tmp_path / "runs", **options)


# ----- what the session may use -------------------------------------------------------------------

@pytest.mark.parametrize("value, ids", [
    ("0,2", ("0", "2")), (" 1 , 3", ("1", "3")), ("-1", ()), ("", ()), ("NoDevFiles", ()),
    ("1,-1,2", ("1",)),  # CUDA stops at the first invalid entry
    ("GPU-8f3a,MIG-2c1d", ("GPU-8f3a", "MIG-2c1d")),
])
def test_visible_devices_read_as_cuda_reads_them(value, ids):
    assert visible_devices(value) == ids


def test_the_narrowest_list_wins(gpus_listed):
    gpus_listed(4)
    assert session_gpus({}) == SessionGpus(("0", "1", "2", "3"), "nvidia-smi -L")
    assert session_gpus({"SLURM_JOB_GPUS": "2,3"}).ids == ("2", "3")
    assert session_gpus({"GPU_DEVICE_ORDINAL": "1"}).ids == ("1",)
    assert session_gpus({"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_GPUS": "2,3"}) == SessionGpus(("0",), "CUDA_VISIBLE_DEVICES")
    assert session_gpus({"CUDA_VISIBLE_DEVICES": "-1"}).ids == ()  # the user turned GPUs off


def test_no_nvidia_smi_means_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert listed_gpus() == ()
    failing = tmp_path / "nvidia-smi"
    failing.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver' >&2\nexit 9\n")
    failing.chmod(0o755)
    assert listed_gpus() == ()


# ----- the placement ------------------------------------------------------------------------------

def test_enough_gpus_give_each_task_its_own_equal_share():
    assert place_gpus(["0", "1"], 2).devices == ("0", "1")
    assert place_gpus(["0", "1", "2", "3", "4"], 2).devices == ("0,1", "2,3")  # one left idle, workers alike
    assert not place_gpus(["3", "5"], 2).shared


def test_fewer_gpus_than_tasks_are_shared_in_turn_with_memory_growth():
    placement = place_gpus(["0", "1"], 3)
    assert placement.devices == ("0", "1", "0") and placement.shared
    def placed(position: int, env: dict) -> dict:  # what the task gets on top of `env`
        return added(env, TaskFacts(gpus=True, position=position, placement=placement), (Step.PLACEMENT,))
    assert placed(2, {}) == {"CUDA_VISIBLE_DEVICES": "0", GROWTH: "true"}
    assert placed(0, {GROWTH: "false"}) == {"CUDA_VISIBLE_DEVICES": "0"}  # the user's choice stays
    assert place_gpus([], 2) is None


# ----- what real tasks receive --------------------------------------------------------------------

def test_each_task_gets_its_own_gpu(tmp_path, gpus_listed):
    gpus_listed(2)
    run = launch(tmp_path, n=2, gpus=True, name="own")
    assert seen_by_tasks(run) == [{"CUDA_VISIBLE_DEVICES": "0", GROWTH: None},
                                  {"CUDA_VISIBLE_DEVICES": "1", GROWTH: None}]
    assert not any("GPU" in note for note in run.notes)
    for snapshot in (run.snapshot(), kwnb.open_run(run.dir).snapshot()):  # live, and its folder reopened
        assert [task.gpu for task in snapshot.tasks] == ["0", "1"]
        table = overview_html(snapshot, ())
        assert "<th>task</th><th>GPU</th><th>status</th>" in table
        assert "<td>worker 0 (chief)</td><td>0</td>" in table and "<td>worker 1</td><td>1</td>" in table


def test_tasks_share_one_gpu_with_memory_growth_and_the_run_says_why_once(tmp_path, gpus_listed):
    gpus_listed(1)
    run = launch(tmp_path, n=3, gpus=True, name="shared")
    assert seen_by_tasks(run) == [{"CUDA_VISIBLE_DEVICES": "0", GROWTH: "true"}] * 3
    (note,) = [note for note in run.notes if "NCCL" in note]
    assert "3 tasks share 1 GPU" in note and "Duplicate GPU detected" in note
    assert run.summary().count(note) == 1


def test_the_session_narrows_the_choice_and_the_user_keeps_growth_off(tmp_path, gpus_listed, monkeypatch):
    gpus_listed(8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    monkeypatch.setenv(GROWTH, "false")
    run = launch(tmp_path, n=2, gpus=True, name="narrowed")
    assert seen_by_tasks(run) == [{"CUDA_VISIBLE_DEVICES": "5", GROWTH: "false"}] * 2
    # The run's own CUDA_VISIBLE_DEVICES (env=) is the pool too, as the session's would be.
    run = launch(tmp_path, n=2, gpus=True, name="pool", env={"CUDA_VISIBLE_DEVICES": "6,7"})
    assert [seen["CUDA_VISIBLE_DEVICES"] for seen in seen_by_tasks(run)] == ["6", "7"]


def test_without_gpus_tasks_see_none(tmp_path, gpus_listed):
    gpus_listed(2)
    run = launch(tmp_path, n=2, name="none")
    assert seen_by_tasks(run) == [{"CUDA_VISIBLE_DEVICES": "-1", GROWTH: None}] * 2
    assert [task.gpu for task in run.snapshot().tasks] == ["", ""]
    assert "<th>GPU</th>" not in overview_html(run.snapshot(), ())
