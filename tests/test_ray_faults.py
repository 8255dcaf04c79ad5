"""The Ray kinds as values (engine/diagnoses/ray_faults.py): the line the Ray backend writes when Ray ends a
task's actor, made from Ray's own words for a lost node and for its memory monitor (as its GCS and raylet
say them), read back from the tasks' tails. The real lost node is tests/test_ray.py's."""
from __future__ import annotations

from kwnb.backends import ray_words
from kwnb.engine.diagnoses import diagnose
from kwnb.engine.diagnoses.diagnosis import RunView
from kwnb.engine.tasks.status import Status
from kwnb.engine.tasks.view import TaskView
from kwnb.task.tf_config import TaskId

NODE_DIED = ("The actor died unexpectedly before finishing this task.\n\tclass_name: Host\n\tip: 10.0.0.12\n"
             "The actor died because its node has died. Node Id: 3591cd74")
LOW_MEMORY = ("The actor died unexpectedly before finishing this task.\n\tclass_name: Host\n"
              "1 worker(s) were killed due to the node running low on memory. To adjust the kill threshold, set "
              "the environment variable `RAY_memory_usage_threshold` when starting Ray.")


def task(position: int, died: str | None = None, node: str = "10.0.0.12") -> TaskView:
    tail = ("epoch 1", ray_words.actor_died(TaskId("worker", position), node, RuntimeError(died))) if died else ()
    ended = died is not None
    return TaskView(position, TaskId("worker", position), position == 0, Status.FAILED if ended else Status.RUNNING,
                    "training", returncode=-9 if ended else None, alive=not ended, tail=tail)


def found(*tasks: TaskView) -> list:
    view = RunView(tasks=tasks, name="r", script="r.py", diagnoses=(), stall_after=0, restart_limit=0)
    return diagnose.findings(view, 100.0)


def test_a_lost_node_is_told_on_each_task_it_held_with_all_of_them_named_and_is_the_origin():
    tasks = (task(0), task(1, NODE_DIED), task(2, NODE_DIED))
    lost = [d for d in found(*tasks) if d.kind == "ray_node_lost"]
    assert [d.task for d in lost] == [1, 2]
    assert lost[0].message.startswith("Ray lost node 10.0.0.12, which held worker 1, worker 2: the node died")
    assert diagnose.origin(found(*tasks), list(tasks)).kind == "ray_node_lost"
    assert not [d for d in found(*tasks) if d.kind == "killed"]  # the same SIGKILL, not a kill from outside too


def test_a_task_the_memory_monitor_ended_is_not_also_killed_from_outside():
    assert [d.kind for d in found(task(0), task(1, LOW_MEMORY)) if d.task == 1] == ["ray_memory_monitor"]


def test_the_memory_monitor_is_told_with_its_threshold_and_a_lost_node_is_not():
    memory = [d for d in found(task(0), task(1, LOW_MEMORY)) if d.kind.startswith("ray_")]
    assert [(d.kind, d.task) for d in memory] == [("ray_memory_monitor", 1)]
    assert "RAY_memory_usage_threshold" in memory[0].message and "10.0.0.12" in memory[0].message
    assert not [d for d in found(task(0), task(1)) if d.kind.startswith("ray_")]  # no line, no Ray kind
