"""The Ray backend on a real 3-node Ray cluster on this machine (tests/ray_support.py): the head in this
machine's network namespace with no CPU for tasks, two nodes each a network host of its own. Skips, with
the reason, where the cluster cannot be started."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import kwnb
from kwnb.errors import LaunchError
from slurm_netns import WHERE

pytestmark = [pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def cluster(ray_cluster, monkeypatch):
    for name, value in ray_cluster.env.items():
        monkeypatch.setenv(name, value)
    return ray_cluster


def launch(cluster, tmp_path: Path, script: Path, n: int, args: str = "", **options) -> kwnb.Run:
    """As `%%kw_worker script -n N --backend ray --address ADDR ...` starts it."""
    options.setdefault("address", cluster.address)
    return kwnb.launch(script, n, args=args, cwd=tmp_path, runs_dir=tmp_path / "runs", launcher="ray", **options)


def whereabouts(run) -> list[dict]:
    return [json.loads(next(line for line in run.logs(w.position).splitlines() if line.startswith("HOST "))[5:])
            for w in run.workers]


def alive(pids) -> list[int]:
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_no_cluster_at_the_address_is_refused_in_one_line(cluster, tmp_path):
    unused = f"{cluster.network.root_address.rsplit('.', 1)[0]}.250:6379"  # on the test's bridge, no host there
    with pytest.raises(LaunchError) as refused:
        launch(cluster, tmp_path, SCRIPTS / "behave.py", 2, address=unused)
    said = str(refused.value)
    assert said.startswith(f"no Ray cluster at {unused}") and "ray start --head" in said and "\n" not in said


def test_resources_no_node_has_are_refused_in_one_line(cluster, tmp_path):
    with pytest.raises(LaunchError) as refused:
        launch(cluster, tmp_path, SCRIPTS / "behave.py", 2, cpus_per_task=64)
    said = str(refused.value)
    assert said.startswith("no node of the Ray cluster can hold one task of 64 CPU") and "\n" not in said
    head = cluster.network.root_address
    assert said.endswith(f"; nodes: {head} nothing, {cluster.node_address(0)} 2 CPU, {cluster.node_address(1)} 2 CPU: "
                         f"lower --cpus-per-task or --gpus-per-task")  # what each node has (the head holds none)
    with pytest.raises(LaunchError, match=r"--spread puts each task on a node of its own, and only 2 "):
        launch(cluster, tmp_path, SCRIPTS / "behave.py", 3, spread=True)


def test_two_workers_fit_on_two_nodes(cluster, tmp_path):
    """--spread: one worker per node, MultiWorkerMirroredStrategy between the two namespaces."""
    script = tmp_path / "where_fit.py"
    script.write_text(WHERE + (SCRIPTS / "keras_fit.py").read_text())
    run = launch(cluster, tmp_path, script, 2, args="2", spread=True)
    try:
        assert run.wait(timeout=400) == [0, 0], run.summary()
    finally:
        run.stop()
    seen = whereabouts(run)
    nodes = [cluster.node_address(0), cluster.node_address(1)]
    assert sorted(s["address"] for s in seen) == nodes  # each from its own node's address
    assert len({s["netns"] for s in seen}) == 2
    workers = run.workers[0].tf_config["cluster"]["worker"]
    assert sorted(address.rpartition(":")[0] for address in workers) == nodes
    assert [w.where.split(",")[0] for w in run.workers] == [f"node {a.rpartition(':')[0]}" for a in workers]
    history = run.history()  # read from the output the actors sent back
    assert [row["epoch"] for row in history] == [0, 1, 2] and 0 <= history[-1]["accuracy"] <= 1
    assert "DONE" in run.logs(0) and "DONE" in run.logs(1)
    assert any(note.startswith("Ray placed the tasks on 2 nodes (spread)") for note in run.notes)
    description = json.loads((run.dir / "run.json").read_text())
    assert description["backend"] == "ray"


def test_a_custom_training_loop_trains_across_two_nodes(cluster, tmp_path):
    """TensorFlow's custom-loop tutorial's shape (tests/scripts/custom_loop.py with its step module), one
    worker per node: both print the same epochs, and the curves are read from those lines."""
    script = tmp_path / "where_loop.py"
    script.write_text(WHERE + (SCRIPTS / "custom_loop.py").read_text())
    (tmp_path / "loop_step.py").write_text((SCRIPTS / "loop_step.py").read_text())
    run = launch(cluster, tmp_path, script, 2, spread=True)
    try:
        assert run.wait(timeout=400) == [0, 0], run.summary()
    finally:
        run.stop()
    assert sorted(s["address"] for s in whereabouts(run)) == [cluster.node_address(0), cluster.node_address(1)]
    line = re.compile(r"^Epoch: (\d+), accuracy: ([0-9.]+), train_loss: ([0-9.]+)\.$", re.MULTILINE)
    printed = [line.findall(run.logs(w.position)) for w in run.workers]
    assert [int(epoch) for epoch, _, _ in printed[0]] == [0, 1, 2]
    assert [loss for _, _, loss in printed[0]] == [loss for _, _, loss in printed[1]]  # one all-reduced loss: in step
    assert run.history(1) == [{"epoch": int(e), "accuracy": float(a), "train_loss": float(t)} for e, a, t in printed[1]]


REPORTS_THEN_WAITS = """import os, time
import kwnb
print("RUN_DIR", os.environ["KWNB_RUN_DIR"], flush=True)
for epoch in range(2):
    kwnb.report(epoch=epoch, loss=1.0 / (epoch + 1))
print("REPORTED", flush=True)
time.sleep(300)
"""


def test_reports_and_stacks_come_back_from_the_nodes(cluster, tmp_path):
    """What a task writes into the run folder (kwnb.report rows, its stacks) is written on its node, in the
    actor's folder, and read back through the actor: no folder shared with the nodes is needed."""
    script = tmp_path / "reports.py"
    script.write_text(REPORTS_THEN_WAITS)
    run = launch(cluster, tmp_path, script, 2, spread=True)
    try:
        assert wait_for(lambda: all("REPORTED" in run.logs(w.position) for w in run.workers), 120), run.summary()
        for worker in run.workers:
            run_dir = next(l for l in run.logs(worker.position).splitlines() if l.startswith("RUN_DIR "))[8:]
            assert run_dir != str(run.dir) and "kwnb-ray-" in run_dir  # the task never wrote into the driver's
        assert wait_for(lambda: all(len(run.history(w.position)) == 2 for w in run.workers), 10), run.summary()
        assert [row["loss"] for row in run.history(1)] == [1.0, 0.5]
        stacks = run.stacks()
        assert sorted(stacks) == [0, 1] and all("reports.py" in text and "line 7" in text for text in stacks.values()), \
            stacks
    finally:
        run.stop()


def test_the_restart_policy_relaunches_the_cluster_on_its_nodes(cluster, tmp_path):
    """--on-failure restart: worker 1 fails once; every task is started again in its bundle, by a new actor,
    and the run finishes [0, 0] with one restart."""
    marker, started = tmp_path / "failed-once", tmp_path / "started"
    started.mkdir()
    run = launch(cluster, tmp_path, SCRIPTS / "behave.py", 2, spread=True, on_failure="restart", max_restarts=1,
                 args=f"--fail-index 1 --fail-once {marker} --sleep 1 --peers-started {started}")
    try:
        assert run.wait(timeout=240) == [0, 0], run.summary()
    finally:
        run.stop()
    assert run.restarts == 1 and run.status == "finished" and [w.restarts for w in run.workers] == [1, 1]
    failed, again = run.logs(1).split("kwnb: restart 1", 1)
    assert "worker 1 failing with exit code 3" in failed and "worker 1 done" in again and "failing" not in again
    nodes = sorted([cluster.node_address(0), cluster.node_address(1)])
    assert sorted(w.address.rpartition(":")[0] for w in run.workers) == nodes  # each on a node again


def test_kill_and_restart_one_task_then_stop_leaves_nothing(cluster, tmp_path):
    """A task killed as a lost machine, restarted on its node with its address; a stop then ends every
    process each task started, a child in a session of its own included (which ray.kill alone leaves)."""
    run = launch(cluster, tmp_path, SCRIPTS / "behave.py", 2, args="--sleep 300 --child session")
    try:
        pattern = re.compile(r"worker (\d) children (\d+)")
        assert wait_for(lambda: all(pattern.search(run.logs(w.position)) for w in run.workers), 120), run.summary()
        address = run.workers[1].address
        first = [run.workers[1].pid, int(pattern.search(run.logs(1))[2])]
        run.kill(1)
        assert wait_for(lambda: run.workers[1].returncode is not None, 60), run.summary()
        assert run.workers[1].returncode == -9 and run.workers[0].returncode is None
        assert wait_for(lambda: not alive(first), 10), alive(first)  # its child in a session of its own too
        run.restart(1)
        assert wait_for(lambda: len(pattern.findall(run.logs(1))) == 2, 120), run.logs(1)
        assert run.workers[1].address == address and run.workers[1].returncode is None
        pids = [w.pid for w in run.workers] + [int(m[1]) for w in run.workers for m in
                                                re.finditer(r"worker \d children (\d+)", run.logs(w.position))]
        assert len(alive(pids)) == 4
    finally:
        run.stop()
    assert wait_for(lambda: not alive(pids), 30), alive(pids)
    assert run.status == "stopped"


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.3)
    return condition()


def test_a_chief_two_workers_and_a_ps_on_the_cluster(cluster, tmp_path):
    """Every role of a ParameterServerStrategy job, packed onto the two nodes (4 tasks of 1 CPU on 2 + 2)."""
    run = launch(cluster, tmp_path, SCRIPTS / "ps_chief_fit.py", 2, chief=True, ps=1)
    try:
        assert run.wait(timeout=500) and run.done, run.summary()
    finally:
        run.stop()
    assert run.status == "finished" and "chief done" in run.logs("chief:0"), run.summary()
    assert [row["epoch"] for row in run.history()] == [0, 1]
    cluster_spec = run.workers[0].tf_config["cluster"]
    assert sorted(cluster_spec) == ["chief", "ps", "worker"] and len(cluster_spec["worker"]) == 2
    nodes = {address.rpartition(":")[0] for addresses in cluster_spec.values() for address in addresses}
    assert nodes == {cluster.node_address(0), cluster.node_address(1)}  # PACK fills both nodes


def test_the_notebook_coordinates_a_ps_job_whose_servers_run_on_the_nodes(cluster, tmp_path):
    """--ps and no chief task: the notebook's process is the ParameterServerStrategy coordinator, at its own node's
    address (the head's, on the test network). The same script, run here with the coordinator's TF_CONFIG as a
    notebook's cell would, trains through the workers and the ps that serve on the nodes."""
    run = launch(cluster, tmp_path, SCRIPTS / "ps_chief_fit.py", 2, ps=1)
    try:
        assert run.wait_ready(timeout=300), run.summary()
        config = run.coordinator_tf_config()
        coordinator = subprocess.run([sys.executable, str(SCRIPTS / "ps_chief_fit.py")], cwd=tmp_path, timeout=300,
                                     env={**os.environ, "TF_CONFIG": json.dumps(config), "TF_USE_LEGACY_KERAS": "1"},
                                     capture_output=True, text=True)
    finally:
        run.stop()
    assert coordinator.returncode == 0 and "chief done" in coordinator.stdout, coordinator.stderr[-3000:]
    assert config["task"] == {"type": "chief", "index": 0}
    assert config["cluster"]["chief"][0].rpartition(":")[0] == cluster.network.root_address
    servers = {address.rpartition(":")[0] for job in ("worker", "ps") for address in config["cluster"][job]}
    assert servers <= {cluster.node_address(0), cluster.node_address(1)} and len(config["cluster"]["worker"]) == 2
    assert all("serving" in run.logs(task.position) for task in run.tasks), run.summary()  # 2 workers and the ps


def test_doctor_checks_the_cluster_and_kwnb_on_every_node(cluster):
    from kwnb.backends.ray_check import ray_rows

    rows = ray_rows(cluster.address)
    assert [row[:2] for row in rows] == [("ray", True), ("ray cluster", True), ("ray nodes", True)], rows
    assert rows[1][2].startswith(f"{cluster.address}: 3 nodes: ") and "kwnb runs on every node (3)" in rows[2][2]
    unused = f"{cluster.network.root_address.rsplit('.', 1)[0]}.250:6379"
    topic, ok, text, fix, blocking = ray_rows(unused)[1]
    assert (topic, ok, blocking) == ("ray cluster", False, True) and text.startswith(f"no Ray cluster at {unused}")
    assert "ray start --head" in fix


def test_the_kernel_ending_leaves_nothing_running(cluster, tmp_path):
    """A Python that launched a run and exits without stopping it (a kernel shut down): its exit handler ends
    every task's processes, a child in a session of its own included, then the actors and the placement group."""
    import subprocess
    import sys

    driver = (f"import re, time, kwnb\n"
              f"run = kwnb.launch({str(SCRIPTS / 'behave.py')!r}, 2, args='--sleep 300 --child session', "
              f"cwd={str(tmp_path)!r}, runs_dir={str(tmp_path / 'runs')!r}, launcher='ray', address={cluster.address!r})\n"
              "while not all('children' in run.logs(w.position) for w in run.workers): time.sleep(0.3)\n"
              "print('PIDS', *[w.pid for w in run.workers], *[re.search(r'children (\\d+)', run.logs(w.position))[1] "
              "for w in run.workers], flush=True)\n")
    result = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    line = next((line for line in result.stdout.splitlines() if line.startswith("PIDS ")), None)
    assert result.returncode == 0 and line, result.stdout + result.stderr[-2000:]
    pids = [int(pid) for pid in line.split()[1:]]
    assert len(pids) == 4 and wait_for(lambda: not alive(pids), 30), alive(pids)


def test_a_node_removed_mid_run_is_named_with_its_tasks_and_nothing_is_left(cluster, tmp_path):
    """Last in this file: the module's cluster has one node fewer after it. Worker 1's node goes as a failed
    machine does (SIGKILL to everything of that node); the diagnosis names the node and the task it held; a
    restart of that task alone, within the failure's grace, is refused at once (it could only come back at an
    address its peer does not know); and the run's end leaves no task process on the node that is left."""
    run = launch(cluster, tmp_path, SCRIPTS / "behave.py", 2, args="--sleep 300 --child session", spread=True,
                 failure_grace=20)
    try:
        pattern = re.compile(r"worker \d children (\d+)")
        assert wait_for(lambda: all(pattern.search(run.logs(w.position)) for w in run.workers), 120), run.summary()
        pids = [w.pid for w in run.workers] + [int(pattern.search(run.logs(w.position))[1]) for w in run.workers]
        lost = run.workers[1].address.rpartition(":")[0]
        cluster.remove_node([cluster.node_address(0), cluster.node_address(1)].index(lost))
        assert wait_for(lambda: any(d.kind == "ray_node_lost" for d in run.diagnoses), 120), run.summary()
        found = next(d for d in run.diagnoses if d.kind == "ray_node_lost")
        assert found.task == 1 and found.message.startswith(f"Ray lost node {lost}, which held worker 1: ")
        asked = time.monotonic()
        with pytest.raises(LaunchError, match=rf"^cannot restart worker 1 alone: Ray lost its node {lost}, "):
            run.restart(1)
        assert time.monotonic() - asked < 10  # not the 60 s of an actor waiting for a bundle that has no node
        assert wait_for(lambda: "not restarted: cannot restart worker 1 alone" in run.logs(1), 10), run.logs(1)
        assert run.wait(timeout=120) is not None
    finally:
        run.stop()
    assert run.status == "failed" and "Ray lost node" in run.reason
    assert not [d for d in run.diagnoses if d.kind == "killed" and d.task == 1], run.summary()  # not twice
    assert wait_for(lambda: not alive(pids), 30), alive(pids)


def test_without_ray_the_backend_says_how_to_install_it(tmp_path):
    """In a Python where `import ray` fails (sys.modules blocks it), as where the extra is not installed."""
    import subprocess
    import sys

    probe = ("import sys; sys.modules['ray'] = None\n"
             "import kwnb\n"
             "try:\n"
             f"    kwnb.launch({str(SCRIPTS / 'behave.py')!r}, 2, launcher='ray', runs_dir={str(tmp_path)!r})\n"
             "except kwnb.KwnbError as error:\n"
             "    print(error)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert result.stdout.strip() == '--backend ray needs Ray, which is not installed here: pip install "kwnb[ray]"', \
        result.stdout + result.stderr
