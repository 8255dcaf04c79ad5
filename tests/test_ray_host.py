"""The Ray actor's side of a task (kwnb/task/ray_host.py), without Ray: a real task process on this machine,
its run folder files on "its node" and read back as the driver reads them (backends/ray.py)."""
import signal
import sys
import time

import pytest

from kwnb.task import ray_host
from kwnb.task.ray_host import TaskHost
from kwnb.task.runfolder import POSITION_ENV, RUN_DIR_ENV, STACKS_SIGNAL_NAME

TASK = """import os, sys, time
import kwnb
print("RUN_DIR", os.environ["KWNB_RUN_DIR"], flush=True)
kwnb.report(step=1, loss=0.5)
os.environ["TF_CONFIG"] = '{"cluster": {}}'
sys.stdin.close()
while not os.path.exists("go"):
    time.sleep(0.05)
kwnb.report(step=2, loss=0.25)
"""


@pytest.fixture
def host(tmp_path):
    host = TaskHost()
    yield host
    host.close()


def read_until(host, condition, seen, seconds=30.0):
    """Read as the driver does (output offset and file markers kept), until `condition(output, files)`."""
    output, files, code = b"", {}, None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data, code, _, changed = host.read(len(output), seen)
        output += data
        for name, (start, chunk, marker) in changed.items():
            files[name] = files.get(name, b"")[:start] + chunk if start else chunk
            seen[name] = marker
        if condition(output, files, code):
            break
        time.sleep(0.1)
    return output, files, code


def test_a_tasks_run_folder_files_live_on_its_node_and_come_back_through_read(host, tmp_path):
    (tmp_path / "task.py").write_text(TASK)
    driver_folder = tmp_path / "driver-run"  # the driver's run folder, which a node does not have
    host.start(sys.executable, [str(tmp_path / "task.py")], {RUN_DIR_ENV: str(driver_folder), POSITION_ENV: "0"},
               str(tmp_path), {})
    seen = {}
    output, files, _ = read_until(host, lambda out, files, code: "tf-config-0.json" in files, seen)
    assert f"RUN_DIR {host.run_folder}" in output.decode()
    assert not driver_folder.exists()  # never written on the node
    assert files["metrics-0.jsonl"].count(b"\n") == 1 and b'"loss": 0.5' in files["metrics-0.jsonl"]
    assert b'"line": 5' in files["tf-config-0.json"]  # where the script set its own TF_CONFIG
    assert files["stacks-0.txt"] == b""  # made at the start: the driver's stacks capture waits for it
    assert host.read(len(output), seen)[3] == {}  # nothing new: nothing sent again

    host.signal(getattr(signal, STACKS_SIGNAL_NAME), group=False)
    _, files, _ = read_until(host, lambda out, files, code: b"task.py" in files.get("stacks-0.txt", b""), seen)
    assert b"task.py" in files["stacks-0.txt"]
    (tmp_path / "go").touch()
    more, files, code = read_until(host, lambda out, files, code: code is not None, seen)
    assert code == 0
    assert list(files) == ["metrics-0.jsonl"] and files["metrics-0.jsonl"].startswith(b'{"time"')
    assert files["metrics-0.jsonl"].count(b"\n") == 1 and b'"loss": 0.25' in files["metrics-0.jsonl"]  # only the row added


def test_a_read_takes_at_most_its_share_and_withholds_the_exit_until_the_rest_is_read(host, tmp_path, monkeypatch):
    monkeypatch.setattr(ray_host, "MAX_READ", 1000)
    script = ("import os, json\nwith open(os.path.join(os.environ['KWNB_RUN_DIR'], 'metrics-0.jsonl'), 'w') as f:\n"
              "    f.write('x' * 2500)\n")
    (tmp_path / "task.py").write_text(script)
    host.start(sys.executable, [str(tmp_path / "task.py")], {RUN_DIR_ENV: "/nowhere", POSITION_ENV: "0"},
               str(tmp_path), {})
    assert host.popen.wait(30) == 0
    seen, sizes, codes = {}, [], []
    for _ in range(5):
        _, code, _, changed = host.read(0, seen)
        codes.append(code)
        for name, (start, chunk, marker) in changed.items():
            if name == "metrics-0.jsonl":
                sizes.append((start, len(chunk)))
            seen[name] = marker
        if code is not None:
            break
    assert sizes == [(0, 1000), (1000, 1000), (2000, 500)]
    assert codes == [None, None, 0]
