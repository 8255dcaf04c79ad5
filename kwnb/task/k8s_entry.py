"""Inside a pod of `kwnb export --to job`: tell this task where it is in its cluster, then run the job's command.

An Indexed Job gives pod i the hostname <job>-i, and the headless Service that is the pods' subdomain
makes it resolvable as <job>-i.<service> in the namespace. So every pod can tell itself the whole cluster
from the Job's name, the Service's name, the port and the run's task list; only JOB_COMPLETION_INDEX (set
by Kubernetes) differs between pods. A TensorFlow run's pod builds its TF_CONFIG (task/tf_config.py); a
`--framework jax` run's (KERAS_BACKEND=jax, as on Slurm) the KERAS_DISTRIBUTION_* variables that
keras.distribution.initialize() reads, pod 0 the coordinator (task/jax_task.py). The export ships this file
and a copy of each module it uses in the job's ConfigMap, so the image needs no kwnb: standard library only.

    python k8s_entry.py main.py ARGS...   # then runs `python main.py ARGS` (this Python)
    python k8s_entry.py COMMAND ARGS...   # or any other command (--command), its variables set

A JAX run's script runs in this process, as kwnb runs it where it places the tasks (task/bootstrap.py): with
jax_task's hook an uncaught exception ends the pod at once, where JAX's shutdown barrier held it up to 300 s.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys

INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in each pod of an Indexed Job
TASKS_ENV = "KWNB_K8S_TASKS"  # the run's tasks in order, "worker:0,worker:1,ps:0": index i is position i
JOB_ENV = "KWNB_K8S_JOB"  # the Job's name: pod i's hostname is <job>-i
SERVICE_ENV = "KWNB_K8S_SERVICE"  # the headless Service, the pods' subdomain
PORT_ENV = "KWNB_K8S_PORT"  # where every TensorFlow task's gRPC server listens, and a JAX run's coordinator
TF_CONFIG_COPY = "tf_config.py"  # beside this file in every pod
JAX_TASK_COPY = "jax_task.py"  # beside it in a --framework jax run's pods only
# Pod 0's coordinator listens on every interface of its pod, JAX's own default ("[::]:PORT",
# jax/_src/distributed.py), not on its DNS name as kwnb binds it where it placed the tasks: a pod has a
# network of its own, whose one interface has the address the headless Service names anyway (and
# loopback), so nothing more is reachable; and binding the name would need the pod's own DNS record,
# which appears only once the Service's endpoints list the pod, possibly after the coordinator starts.
EVERY_INTERFACE = "[::]"


def _task_module(copy: str):
    """kwnb.task's module of that file, or in a pod (no kwnb) the copy beside this file, under a private name so
    that a module of the user's of the same name is not shadowed; None where the export shipped no copy."""
    name = copy.removesuffix(".py")
    if __package__:  # imported as kwnb.task.k8s_entry
        return importlib.import_module(f"{__package__}.{name}")
    private = f"_kwnb_{name}"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), copy)
    if private not in sys.modules and os.path.exists(path):
        spec = importlib.util.spec_from_file_location(private, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[private] = module  # dataclasses look the module up while they build TaskId
        spec.loader.exec_module(module)
    return sys.modules.get(private)


def _jax_task(environ):
    """task/jax_task.py where this pod is a --framework jax run's, else None."""
    jax_task = _task_module(JAX_TASK_COPY)
    return jax_task if jax_task is not None and jax_task.keras_on_jax(environ) else None


def addresses(job: str, service: str, port: int, count: int) -> list[str]:
    """Every pod's stable DNS name and port, index 0 first."""
    return [f"{job}-{index}.{service}:{port}" for index in range(count)]


def cluster_variables_for(environ) -> tuple[dict[str, str], str]:
    """(the variables that tell this pod its cluster, a line naming it) from the pod's environment; KeyError or
    ValueError if a variable is missing or wrong."""
    tf_config = _task_module(TF_CONFIG_COPY)
    tasks = [tf_config.TaskId.parse(text) for text in environ[TASKS_ENV].split(",")]
    index = int(environ[INDEX_ENV])
    if not 0 <= index < len(tasks):
        raise ValueError(f"{INDEX_ENV}={index}, but the job has {len(tasks)} tasks")
    port = int(environ[PORT_ENV])
    hosts = addresses(environ[JOB_ENV], environ[SERVICE_ENV], port, len(tasks))
    jax_task = _jax_task(environ)
    if jax_task is not None:
        variables = {**jax_task.cluster_variables(hosts, index), jax_task.BIND_ENV: f"{EVERY_INTERFACE}:{port}"}
        role = f"the coordinator, listening on {EVERY_INTERFACE}:{port}" if index == 0 else f"coordinator {hosts[0]}"
        return variables, f"{tasks[index]} of {len(tasks)} at {hosts[index].rpartition(':')[0]}, {role}"
    config = tf_config.tf_config_json(tf_config.cluster_spec(tasks, hosts), tasks[index])
    return {"TF_CONFIG": config}, f"{tasks[index]} at {hosts[index]}"


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: k8s_entry.py SCRIPT.py [ARGS...] | COMMAND [ARGS...]")
    try:
        variables, who = cluster_variables_for(os.environ)
    except KeyError as missing:
        sys.exit(f"kwnb: {missing} is not set: this entry point runs in a pod of an Indexed Job written by kwnb export")
    except ValueError as error:
        what = "TF_CONFIG" if _jax_task(os.environ) is None else "keras.distribution's variables"
        sys.exit(f"kwnb: cannot build {what}: {error}")
    os.environ.update(variables)
    print(f"kwnb: this pod is {who}", file=sys.stderr, flush=True)
    # exec, not a child: the command keeps PID 1 and so gets the pod's SIGTERM, and a script sees
    # the sys.argv, __main__, sys.path[0] and working directory that `python main.py ARGS` gives it.
    command = [sys.executable, *argv] if argv[0].endswith(".py") else argv
    jax_task = _jax_task(os.environ)
    if jax_task is not None and argv[0].endswith(".py"):
        run_here(argv, jax_task)
        return
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"kwnb: cannot run {command[0]}: {error.strerror or error}", file=sys.stderr)
        sys.exit(127)  # a shell's code for a command it cannot find


def run_here(argv: list[str], jax_task) -> None:
    """`python main.py ARGS` in this process (still PID 1, so the pod's SIGTERM reaches the script): the script's
    __main__, sys.argv and sys.path[0] as Python gives them, and an uncaught exception printed from the script's
    first frame on, then the process ended at once (jax_task.prepare)."""
    script = os.path.abspath(argv[0])
    sys.argv, sys.path[0] = list(argv), os.path.dirname(script)

    def from_the_script(kind, value, tb) -> None:
        first = tb
        while first is not None and first.tb_frame.f_code.co_filename != script:
            first = first.tb_next  # this file's and runpy's frames say nothing about the script
        first = first or tb
        # The exception's own __traceback__ is what Python prints (the hook's argument alone is not enough).
        sys.__excepthook__(kind, value.with_traceback(first) if value is not None else value, first)

    jax_task.prepare(from_the_script)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
