"""kwnb.engine.live.cluster: which tasks a cluster has, where they listen and the TF_CONFIG each one is given."""
from __future__ import annotations

import json
import random
import socket

import pytest

from kwnb.engine.live.cluster import MAX_TASKS, TaskId, address_of, cluster_spec, localhost_cluster, plan_tasks, tf_config, tf_config_json
from kwnb.machine.ports import free_ports


@pytest.mark.parametrize("workers, message", [
    (0, "at least 1"),
    (-1, "at least 1"),
    ("2", "must be an integer"),
    ("abc", "must be an integer"),
    (2.0, "must be an integer"),
    (None, "must be an integer"),
    (True, "must be an integer"),
    (False, "must be an integer"),
    (MAX_TASKS + 1, f"at most {MAX_TASKS}"),
    (10_000, f"at most {MAX_TASKS}"),
])
def test_plan_tasks_rejects_bad_worker_counts(workers, message):
    with pytest.raises(ValueError, match=message) as error:
        plan_tasks(workers)
    assert "workers" in str(error.value) or "tasks" in str(error.value)


@pytest.mark.parametrize("ps, message", [(-1, "at least 0"), (True, "integer"), (1.5, "integer"), ("1", "integer")])
def test_plan_tasks_rejects_bad_ps_counts(ps, message):
    with pytest.raises(ValueError, match=message) as error:
        plan_tasks(2, ps=ps)
    assert "ps" in str(error.value)


def test_plan_tasks_limit_counts_all_tasks():
    assert len(plan_tasks(MAX_TASKS)) == MAX_TASKS
    assert len(plan_tasks(MAX_TASKS - 2, ps=2)) == MAX_TASKS
    with pytest.raises(ValueError, match=f"{MAX_TASKS + 1} tasks"):
        plan_tasks(MAX_TASKS - 2, ps=3)
    with pytest.raises(ValueError, match=f"{MAX_TASKS + 1} tasks"):
        plan_tasks(MAX_TASKS, chief=True)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_plan_tasks_workers_in_order(n):
    assert plan_tasks(n) == [TaskId("worker", i) for i in range(n)]


def test_plan_tasks_with_ps_and_chief():
    assert plan_tasks(2, ps=2) == [TaskId("worker", 0), TaskId("worker", 1), TaskId("ps", 0), TaskId("ps", 1)]
    assert plan_tasks(1, ps=1, chief=True) == [TaskId("chief", 0), TaskId("worker", 0), TaskId("ps", 0)]
    assert plan_tasks(0, chief=True) == [TaskId("chief", 0)]  # a chief alone needs no workers
    with pytest.raises(ValueError):
        plan_tasks(0)


def test_task_str():
    assert str(TaskId("worker", 1)) == "worker 1"
    assert str(TaskId("ps", 0)) == "ps 0"


def test_cluster_spec_orders_types_and_indices_whatever_the_input_order():
    tasks = plan_tasks(3, ps=2, chief=True)
    addresses = {task: f"host{i}:{2000 + i}" for i, task in enumerate(tasks)}
    shuffled = tasks[:]
    random.Random(0).shuffle(shuffled)
    assert shuffled != tasks
    spec = cluster_spec(shuffled, [addresses[t] for t in shuffled])
    assert list(spec) == ["chief", "worker", "ps"]
    for kind, listed in spec.items():
        assert listed == [addresses[TaskId(kind, i)] for i in range(len(listed))]
    assert {kind: len(v) for kind, v in spec.items()} == {"chief": 1, "worker": 3, "ps": 2}


def test_cluster_spec_needs_one_address_per_task():
    with pytest.raises(ValueError, match="one address per task"):
        cluster_spec(plan_tasks(2), ["localhost:1"])


def test_tf_config_names_the_task_in_the_shared_cluster():
    tasks = plan_tasks(2, ps=1)
    cluster = localhost_cluster(tasks, ports=[1111, 2222, 3333])
    assert cluster == {"worker": ["localhost:1111", "localhost:2222"], "ps": ["localhost:3333"]}
    configs = [tf_config(cluster, task) for task in tasks]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1},
                                            {"type": "ps", "index": 0}]
    assert all(c["cluster"] == cluster for c in configs)
    assert json.loads(tf_config_json(cluster, tasks[1])) == configs[1]
    assert [address_of(cluster, t) for t in tasks] == ["localhost:1111", "localhost:2222", "localhost:3333"]


@pytest.mark.parametrize("task", [TaskId("worker", 2), TaskId("ps", 0), TaskId("chief", 0)])
def test_tf_config_rejects_a_task_outside_the_cluster(task):
    cluster = localhost_cluster(plan_tasks(2), ports=[1111, 2222])
    with pytest.raises(ValueError, match="no "):
        tf_config(cluster, task)


def test_localhost_cluster_picks_distinct_ports():
    cluster = localhost_cluster(plan_tasks(4))
    ports = [int(a.rpartition(":")[2]) for a in cluster["worker"]]
    assert all(a.startswith("localhost:") for a in cluster["worker"])
    assert len(set(ports)) == 4


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(MAX_TASKS)
    assert len(ports) == MAX_TASKS == len(set(ports))
    assert all(isinstance(p, int) and 1024 <= p <= 65535 for p in ports)
    sockets = []
    try:
        for port in ports:  # all at once: what a cluster on one machine needs
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("localhost", port))
            sock.listen()
    finally:
        for sock in sockets:
            sock.close()
