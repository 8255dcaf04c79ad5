"""Inside a pod of `kwnb export --to job`: build this task's TF_CONFIG, then run the job's command.

An Indexed Job gives pod i the hostname <job>-i, and the headless Service that is the pods' subdomain
makes it resolvable as <job>-i.<service> in the namespace. So every pod can write the whole cluster
spec itself from the Job's name, the Service's name, the port and the run's task list; only
JOB_COMPLETION_INDEX (set by Kubernetes) differs between pods. The export ships this file and a
copy of tf_config.py in the job's ConfigMap, so the image needs no kwnb: standard library only.

    python k8s_entry.py main.py ARGS...   # then runs `python main.py ARGS` (this Python)
    python k8s_entry.py COMMAND ARGS...   # or any other command (--command), TF_CONFIG set
"""
from __future__ import annotations

import importlib.util
import os
import sys

INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in each pod of an Indexed Job
TASKS_ENV = "KWNB_K8S_TASKS"  # the run's tasks in order, "worker:0,worker:1,ps:0": index i is position i
JOB_ENV = "KWNB_K8S_JOB"  # the Job's name: pod i's hostname is <job>-i
SERVICE_ENV = "KWNB_K8S_SERVICE"  # the headless Service, the pods' subdomain
PORT_ENV = "KWNB_K8S_PORT"  # where every task's gRPC server listens
TF_CONFIG_COPY = "tf_config.py"  # beside this file in the pod


def _tf_config_module():
    """kwnb.task.tf_config, or in a pod (no kwnb) the copy beside this file, under a private name so
    that a module tf_config of the user's is not shadowed."""
    try:
        from . import tf_config
        return tf_config
    except ImportError:  # run as a file: no package around it
        pass
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), TF_CONFIG_COPY)
    spec = importlib.util.spec_from_file_location("_kwnb_tf_config", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while they build TaskId
    spec.loader.exec_module(module)
    return module


def addresses(job: str, service: str, port: int, count: int) -> list[str]:
    """Every pod's stable DNS name and port, index 0 first."""
    return [f"{job}-{index}.{service}:{port}" for index in range(count)]


def tf_config_for(environ) -> tuple[str, str]:
    """(TF_CONFIG as JSON, a line naming this task) from the pod's environment; KeyError or ValueError if
    a variable is missing or wrong."""
    tf_config = _tf_config_module()
    tasks = [tf_config.TaskId.parse(text) for text in environ[TASKS_ENV].split(",")]
    index = int(environ[INDEX_ENV])
    if not 0 <= index < len(tasks):
        raise ValueError(f"{INDEX_ENV}={index}, but the job has {len(tasks)} tasks")
    hosts = addresses(environ[JOB_ENV], environ[SERVICE_ENV], int(environ[PORT_ENV]), len(tasks))
    cluster = tf_config.cluster_spec(tasks, hosts)
    return tf_config.tf_config_json(cluster, tasks[index]), f"{tasks[index]} at {hosts[index]}"


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: k8s_entry.py SCRIPT.py [ARGS...] | COMMAND [ARGS...]")
    try:
        config, who = tf_config_for(os.environ)
    except KeyError as missing:
        sys.exit(f"kwnb: {missing} is not set: this entry point runs in a pod of an Indexed Job written by kwnb export")
    except ValueError as error:
        sys.exit(f"kwnb: cannot build TF_CONFIG: {error}")
    os.environ["TF_CONFIG"] = config
    print(f"kwnb: this pod is {who}", file=sys.stderr, flush=True)
    # exec, not a child: the command keeps PID 1 and so gets the pod's SIGTERM, and a script sees
    # the sys.argv, __main__, sys.path[0] and working directory that `python main.py ARGS` gives it.
    command = [sys.executable, *argv] if argv[0].endswith(".py") else argv
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"kwnb: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        sys.exit(127)  # a shell's code for a command it cannot find


if __name__ == "__main__":
    main(sys.argv[1:])
