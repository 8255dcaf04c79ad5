"""The Slurm backend across hosts: runs on the 2-node test Slurm, each node a network host of its own.

conftest.py starts the cluster (tests/slurm_support.py with tests/slurm_netns.py): each node is a
network namespace with its own address on a private bridge and its own slurmd, so a run's tasks on
different nodes reach each other only over that network, by the node names Slurm gives them. Skips,
with the reason, where no namespaces can be made.
"""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from IPython import get_ipython
from IPython.testing.globalipapp import start_ipython

import kwnb
import slurm_netns
from slurm_netns import WHERE
import slurm_support
from kwnb.engine.diagnoses.stacks import blocked_at
from kwnb.slurm import SlurmLauncher
from kwnb.pictures.outputs import pictures_ready
from waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture
def nodes(slurm_nodes, monkeypatch):
    """The 2-node cluster, with SLURM_CONF pointing at it for kwnb's sbatch, squeue and scancel."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_nodes.conf))
    return slurm_nodes


def launch(tmp_path: Path, script: Path, n: int, args: str = "") -> kwnb.Run:
    """A run on both nodes (--nodes 2), as `%%kw_worker ... --backend slurm --nodes 2 --time 5` starts it."""
    return kwnb.launch(script, n, args=args, cwd=tmp_path, runs_dir=tmp_path / "runs",
                       launcher=SlurmLauncher(nodes=2, time="5"))


def records(run) -> list[dict]:
    """What each task wrote when it started: its TF_CONFIG, its node, its pid (slurm-task-N.json)."""
    return [json.loads((run.dir / f"slurm-task-{position}.json").read_text()) for position in range(len(run.workers))]


def whereabouts(run) -> list[dict]:
    """The HOST line each task printed (WHERE)."""
    return [json.loads(next(line for line in run.logs(w.position).splitlines() if line.startswith("HOST "))[5:])
            for w in run.workers]


def netns_of(node: str) -> str:
    """The node's network namespace as /proc/PID/ns/net names it."""
    return f"net:[{os.stat(f'/var/run/netns/{node}').st_ino}]"


def in_netns(pid: int, node: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == netns_of(node)
    except FileNotFoundError:
        return False


def where_fit(tmp_path: Path) -> Path:
    script = tmp_path / "where_fit.py"
    script.write_text(WHERE + (SCRIPTS / "keras_fit.py").read_text())
    return script


def other(cluster, node: str) -> str:
    return next(name for name in cluster.nodes if name != node)


def test_each_node_is_a_host_of_its_own(nodes):
    """Addresses, names and daemons: what the runs below stand on."""
    first, second = nodes.nodes
    addresses = {node: nodes.address(node) for node in nodes.nodes}
    assert len(set(addresses.values())) == 2
    assert all(ipaddress.ip_address(address) in nodes.network.subnet for address in addresses.values())
    for node in nodes.nodes:
        shown = nodes.in_node(node, "ip", "-4", "-o", "addr", "show").stdout
        assert f"inet {addresses[node]}/24" in shown and addresses[other(nodes, node)] not in shown
        # Each name resolves, from every node, to that node's own address (/etc/hosts, written by the setup).
        lookup = nodes.in_node(node, "getent", "hosts", first, second).stdout.split()
        assert lookup == [addresses[first], first, addresses[second], second]
    states = nodes.run("sinfo", "-h", "-N", "-o", "%N|%t|%c").stdout.split()
    assert states == [f"{node}|idle|{nodes.cpus}" for node in nodes.nodes]
    hosts = nodes.run("scontrol", "show", "node", first).stdout
    assert f"NodeAddr={addresses[first]}" in hosts


def test_one_task_per_node_trains_across_the_network(nodes, tmp_path):
    """n=2 with --nodes 2: each worker on its own host, MultiWorkerMirroredStrategy over the bridge."""
    run = launch(tmp_path, where_fit(tmp_path), 2, args="2")
    try:
        assert run.wait(timeout=300) == [0, 0], run.summary()
    finally:
        run.stop()
    assert run.status == "finished"
    placed = records(run)
    assert [r["host"] for r in placed] == nodes.nodes
    workers = placed[0]["tf_config"]["cluster"]["worker"]
    port = workers[0].rpartition(":")[2]
    assert workers == [f"{node}:{port}" for node in nodes.nodes]  # different hosts, rank 0 on each: one port
    assert all(r["tf_config"]["cluster"] == {"worker": workers} for r in placed)
    seen = whereabouts(run)
    assert [s["address"] for s in seen] == [nodes.address(node) for node in nodes.nodes]
    assert [s["netns"] for s in seen] == [netns_of(node) for node in nodes.nodes]
    assert [w.where.split(",")[0] for w in run.workers] == [f"job {run.launcher.jobs[0].id} on {node}"
                                                            for node in nodes.nodes]
    assert all(w.port_open_at for w in run.workers)  # kwnb's probe reached each TensorFlow server from here
    # Curves and history as for local runs: the chief's epochs, followed from its log on the shared folder.
    history = run.history()
    assert [row["epoch"] for row in history] == [0, 1, 2] and 0 <= history[-1]["accuracy"] <= 1
    assert pictures_ready(run) and (run.dir / "curves.png").exists()
    assert "DONE" in run.logs(0) and "DONE" in run.logs(1)


def test_two_tasks_on_one_node_and_one_on_the_other(nodes, tmp_path):
    """n=3 on 2 nodes: block distribution puts tasks 0 and 1 on the first node (two ports), 2 on the second."""
    run = launch(tmp_path, where_fit(tmp_path), 3, args="2")
    try:
        assert run.wait(timeout=300) == [0, 0, 0], run.summary()
    finally:
        run.stop()
    first, second = nodes.nodes
    placed = records(run)
    assert [r["host"] for r in placed] == [first, first, second]
    workers = placed[0]["tf_config"]["cluster"]["worker"]
    base = int(workers[0].rpartition(":")[2])
    assert workers == [f"{first}:{base}", f"{first}:{base + 1}", f"{second}:{base}"]
    assert [r["tf_config"]["task"] for r in placed] == [{"type": "worker", "index": i} for i in range(3)]
    assert [w.tf_config["cluster"]["worker"] for w in run.workers] == [workers] * 3
    seen = whereabouts(run)
    assert [s["address"] for s in seen] == [nodes.address(first)] * 2 + [nodes.address(second)]
    assert [s["netns"] for s in seen] == [netns_of(first)] * 2 + [netns_of(second)]
    assert len({r["pid"] for r in placed[:2]}) == 2  # two processes on the first node
    assert [row["epoch"] for row in run.history()] == [0, 1, 2]


def test_stop_ends_the_job_on_every_node(nodes, tmp_path):
    run = launch(tmp_path, SCRIPTS / "behave.py", 2, args="--sleep 120")
    try:
        assert wait_until(lambda: all("started" in run.logs(w.position) for w in run.workers), 60), run.summary()
        assert [r["host"] for r in records(run)] == nodes.nodes
        codes = run.stop()
    finally:
        run.stop()
    assert run.status == "stopped" and codes == [-signal.SIGTERM] * 2
    job = run.launcher.jobs[0].id
    assert nodes.run("squeue", "-h", "-j", job, "-t", "RUNNING,PENDING").stdout.strip() == ""
    # Nothing of the job is left on either host: only that node's slurmd runs in its namespace.
    for node in nodes.nodes:
        slurmd = nodes.procs[f"slurmd-{node}"].pid
        assert wait_until(lambda: pids_in(node) == [slurmd], 15), (node, pids_in(node), slurmd)


def pids_in(node: str) -> list[int]:
    marker = os.stat(f"/var/run/netns/{node}").st_ino
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.stat(entry / "ns" / "net").st_ino == marker:
                found.append(int(entry.name))
        except OSError:
            continue
    return sorted(found)


def test_a_task_that_raises_on_the_second_node_fails_the_run_and_is_named(nodes, tmp_path):
    run = launch(tmp_path, SCRIPTS / "diagnose_fit.py", 2, args="raise 20")
    try:
        run.wait(timeout=300)
    finally:
        run.stop()
    assert [r["host"] for r in records(run)] == nodes.nodes
    assert run.status == "failed" and run.exit_codes[1] == 1, run.summary()
    errors = [d for d in run.diagnoses if d.kind == "error"]
    assert [d.task for d in errors] == [1], run.diagnoses
    assert "worker 1 failed with ValueError: bad batch on worker 1" in errors[0].message
    # Worker 0, on the other host, saw its peer's socket close: kwnb names the peer it lost.
    assert ("peer_lost", 1) in [(d.kind, d.task) for d in run.diagnoses], run.diagnoses
    assert run.reason.startswith("worker 1 failed with ValueError"), run.reason


def test_a_task_killed_on_its_node_is_seen_at_once_while_the_job_runs(nodes, tmp_path):
    """A task killed on its host (there: the node's OOM killer, say) leaves no exit file, and its job goes on
    (srun --kill-on-bad-exit=0): kwnb takes the end from srun's report, not from the job's end."""
    run = launch(tmp_path, SCRIPTS / "behave.py", 2, args="--sleep 120")
    try:
        assert wait_until(lambda: all("started" in run.logs(w.position) for w in run.workers), 60), run.summary()
        placed = records(run)
        assert placed[1]["host"] == nodes.nodes[1]
        os.kill(placed[1]["pid"], signal.SIGKILL)
        assert wait_until(lambda: run.workers[1].returncode is not None, 10), run.summary()
        assert run.workers[1].returncode == -signal.SIGKILL and run.workers[0].returncode is None, run.summary()
        assert nodes.job_state(run.launcher.jobs[0].id) == "RUNNING"
        run.wait(timeout=60)  # kwnb stops worker 0 after the failure grace (5 s)
    finally:
        run.stop()
    killed = [d for d in run.diagnoses if d.kind == "killed"]
    assert [d.task for d in killed] == [1] and "worker 1 was killed by SIGKILL from outside kwnb" in killed[0].message
    assert run.status == "failed" and run.reason.startswith("worker 1 was killed by SIGKILL"), run.reason


# The tasks' Python, except that task 1 waits (at most 60 s) for a file before it starts: until then its
# bootstrap has not set up the stacks signal's handler, and that signal would end it.
LATE_PYTHON = """#!/bin/sh
if [ "$SLURM_PROCID" = 1 ]; then
    i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
fi
exec {python} "$@"
"""


def test_stacks_of_every_task_on_both_nodes_once_each_can_take_the_signal(nodes, tmp_path, capsys):
    """%kw_stack under Slurm: scancel --signal=USR2 reaches every task of the job, so kwnb sends it only once
    each task's bootstrap handles it; then each task, on its own host, writes its stacks to the shared run
    folder, and the job goes on."""
    go, python = tmp_path / "go", tmp_path / "python-late"
    python.write_text(LATE_PYTHON.format(go=go, python=sys.executable))
    python.chmod(0o755)
    run = kwnb.launch(SCRIPTS / "behave.py", 2, args="--sleep 120", python=str(python), cwd=tmp_path,
                      runs_dir=tmp_path / "runs", launcher=SlurmLauncher(nodes=2, time="5"))
    shell = start_ipython() or get_ipython()  # start_ipython gives the shell to its first caller only
    shell.run_line_magic("load_ext", "kwnb")
    try:
        assert wait_until(lambda: "started" in run.logs(0), 60), run.summary()
        assert run.stacks() == {}  # task 1 could not take the signal yet: none was sent
        assert run.exit_codes == [None, None] and "started" not in run.logs(1), run.summary()
        go.touch()
        assert wait_until(lambda: "started" in run.logs(1), 60), run.summary()
        dumps = run.stacks()
        assert sorted(dumps) == [0, 1], dumps
        sleep_line = 1 + (SCRIPTS / "behave.py").read_text().splitlines().index("time.sleep(args.sleep)")
        assert all(blocked_at(text, (str(run.script),)) == f"behave.py line {sleep_line}, in <module>"
                   for text in dumps.values()), dumps
        capsys.readouterr()
        shell.run_line_magic("kw_stack", run.name)
        printed = capsys.readouterr().out
        job = run.launcher.jobs[0].id
        for position, placed in enumerate(records(run)):
            assert f"===== worker {position} (job {job} on {placed['host']}, pid {placed['pid']}) =====" in printed
        assert printed.count(f"behave.py\", line {sleep_line} in <module>") == 2, printed
        assert run.exit_codes == [None, None] and nodes.job_state(job) == "RUNNING", run.summary()
        assert [r["host"] for r in records(run)] == nodes.nodes
    finally:
        go.touch()
        run.stop()
    assert "=====" not in run.logs(0) + run.logs(1)  # the stacks went to the run folder, not into the logs


def own_things(token: str) -> dict[str, list[str]]:
    """The namespaces, links and /etc/hosts lines named after a setup's token, as the machine has them now."""
    links = [line.split()[0].split("@")[0] for line in slurm_netns._ip("-br", "link").stdout.splitlines()]
    return {"netns": sorted(name for name in os.listdir("/var/run/netns") if name.startswith(token)),
            "links": sorted(name for name in links if name.startswith(token)),
            "hosts": [line for line in Path("/etc/hosts").read_text().splitlines() if line.endswith(f" {token}")]}


def test_a_second_cluster_gets_its_own_network_and_removes_only_that(nodes):
    """Two sessions on one machine: names, subnet and /etc/hosts lines of their own; each removes only its own."""
    first = own_things(nodes.network.token)
    assert len(first["netns"]) == 3 and len(first["links"]) == 4 and len(first["hosts"]) == 2  # bridge, 3 veths
    other = slurm_support.start(partition="second", hosts=2)
    try:
        assert other.network.token != nodes.network.token
        assert not other.network.subnet.overlaps(nodes.network.subnet)
        assert set(other.nodes).isdisjoint(nodes.nodes)
        assert other.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split() == [other.nodes[0], "idle",
                                                                               other.nodes[1], "idle"]
        pids = [proc.pid for proc in other.procs.values()]
    finally:
        other.stop()
    assert own_things(other.network.token) == {"netns": [], "links": [], "hosts": []}
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids) and not other.workdir.exists()
    assert own_things(nodes.network.token) == first
    assert nodes.run("sinfo", "-h", "-N", "-o", "%t").stdout.split() == ["idle", "idle"]


def test_what_a_killed_session_left_is_removed_and_nothing_else(nodes, tmp_path):
    """After a kill -9 the namespaces and /etc/hosts lines stay; the next start removes those whose pid is gone."""
    dead = next(pid for pid in range(99999, 10**6) if not Path(f"/proc/{pid}").exists())
    token = f"kwnb{dead}a"
    slurm_netns._ip("netns", "add", f"{token}n1")
    sleeper = subprocess.Popen([*nodes.network.enter(f"{token}n1"), "sleep", "300"])  # a job step left behind
    try:
        # nsenter joins the namespace after Popen returns: on a busy machine, 5 of 30 had not yet when asked
        assert wait_until(lambda: in_netns(sleeper.pid, f"{token}n1"), timeout=30, interval=0.01)
        slurm_netns._edit_hosts(lambda lines: lines + [f"10.213.99.11 {token}n1 {slurm_netns.MARK} {token}\n"])
        live = own_things(nodes.network.token)
        slurm_netns.remove_stale()
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert own_things(token) == {"netns": [], "links": [], "hosts": []}
        assert own_things(nodes.network.token) == live  # a live session's things are left alone
    finally:
        sleeper.kill()
        slurm_netns._ip("netns", "del", f"{token}n1", check=False)
        slurm_netns._edit_hosts(lambda lines: [line for line in lines if not line.rstrip().endswith(token)])
