"""Every task's environment, declared and built here only: each variable kwnb gives a task is one row
of COMMON or of its framework's (its name, what it is for, who sets it, how its value is made), and
`task_environment` builds a task's whole environment from them. The engine (a run's tasks, any backend), the local launcher, the
warm pool, the Slurm job, the Kubernetes exports and the doctor all take theirs from here, so a new
variable for tasks is one row. A framework brings its own rows (TensorFlow: TF_USE_LEGACY_KERAS and
TF_CONFIG; Keras 3 on JAX: KERAS_BACKEND and the KERAS_DISTRIBUTION_* that keras.distribution.initialize()
reads, task 0 the coordinator), both made from where kwnb placed the tasks (TaskFacts.config).

A task's variables come in steps, each over the ones before (`Step`):
  the session's environment (os.environ), which a task started from here inherits;
  DEFAULT   kwnb's defaults;
  TASK      kwnb's own variables for one task of a run;
  CLUSTER   the cluster as this task is told it (the framework's), where kwnb placed the tasks;
            the user's --env, over all of the above;
  PLACEMENT the task's GPUs under --gpus, over the user's CUDA_VISIBLE_DEVICES (the pool chosen from);
  THREADS, TEMP  what a task started on this machine adds (the local launcher, the warm pool), each
            only where neither the session nor the user set it.
A pod of a Kubernetes export inherits nothing: it gets the rows marked `in_pods` and the user's --env.
A backend's own variables for its task-side code (Slurm's KWNB_SLURM_*, the Job's KWNB_K8S_*) are
declared beside that code (task/runfolder.py, task/k8s_entry.py).
"""
from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..task.jax_task import (BACKEND_ENV, BIND_ENV, JOB_ADDRESSES_ENV, NUM_PROCESSES_ENV, PROCESS_ID_ENV,
                             cluster_variables)
from ..task.runfolder import PARENT_PID_ENV, POSITION_ENV, RUN_DIR_ENV
from .gpus import session_gpus
from .task_temp import private_folder


class Step(enum.IntEnum):
    DEFAULT = 1
    TASK = 2
    CLUSTER = 3
    PLACEMENT = 4  # after the user's --env
    THREADS = 5
    TEMP = 6


BEFORE_THE_USER = (Step.DEFAULT, Step.TASK, Step.CLUSTER)
ON_THIS_MACHINE = (Step.THREADS, Step.TEMP)  # what a task started on this machine adds (local, the warm pool)


@dataclass(frozen=True)
class GpuPlacement:
    devices: tuple[str, ...]  # each task's CUDA_VISIBLE_DEVICES, by position
    shared: bool  # fewer GPUs than tasks: some tasks share one


@dataclass(frozen=True)
class TaskFacts:
    """What one task's variables are made from; the defaults describe no run's task in particular
    (the warm pool's interpreters, the doctor's probe)."""

    gpus: bool = False  # --gpus
    run_dir: str = ""
    position: int | None = None
    config: dict = field(default_factory=dict)  # its TF_CONFIG where kwnb placed the tasks; {}: it builds its own
    placement: GpuPlacement | None = None  # under --gpus on this machine
    tasks: int = 1  # how many tasks share this machine's CPUs
    cpus: float = 1.0  # the CPUs the session may use (machine/limits.py)
    framework: "Framework | None" = None  # None: TENSORFLOW


Value = Callable[[TaskFacts, Mapping[str, str]], "str | None"]  # from the facts and the environment so far; None: unset


@dataclass(frozen=True)
class Variable:
    name: str
    step: Step | Callable[[TaskFacts], Step]
    value: Value
    why: str
    set_by: str = "kwnb, for every task it starts"
    in_pods: bool = False  # a pod of a Kubernetes export gets it too
    keyed: bool = True  # read at import or device set-up: a warm interpreter must have started with it (backends/warm.py)
    per_task: bool = False  # differs between a run's tasks or names this machine: never set for a whole job

    def step_for(self, facts: TaskFacts) -> Step:
        return self.step(facts) if callable(self.step) else self.step


@dataclass(frozen=True)
class Framework:
    name: str
    variables: tuple[Variable, ...]
    gpus_per_task: int | None = None  # None: an equal share of the GPUs; JAX: one device per process


def _always(value: str) -> Value:
    return lambda facts, env: value


def _tf_config(facts: TaskFacts, env) -> str | None:
    return json.dumps(facts.config) if facts.config else None


LEGACY_KERAS = "TF_USE_LEGACY_KERAS"  # tf.keras is tf-keras only where it is one of TensorFlow's true words
LEGACY_TRUE = ("1", "true", "True")


def legacy_keras(env) -> bool:
    """Whether TensorFlow here takes tf.keras from tf-keras (and `import tensorflow` loads no Keras 3)."""
    return env.get(LEGACY_KERAS) in LEGACY_TRUE


TENSORFLOW = Framework("tensorflow", (
    Variable(LEGACY_KERAS, Step.DEFAULT, _always("1"),
             "Keras 3 cannot run MultiWorkerMirroredStrategy; tf-keras can", set_by="kwnb, for every task and pod",
             in_pods=True),  # read at `import tensorflow` (which package `from tensorflow.keras import ...` loads)
    # jax's __init__ sets TF_CPP_MIN_LOG_LEVEL=1 in os.environ (setdefault), and TensorFlow 2.21 imports jax where
    # it is installed: a kernel that imported TensorFlow (TensorBoard's event reader) would pass the 1 on to every
    # task and warm interpreter started after it, and their joining lines (INFO) would never be written.
    Variable("TF_CPP_MIN_LOG_LEVEL", Step.DEFAULT, _always("0"),
             "TensorFlow's INFO lines say when a task joins its cluster, which kwnb's phases and diagnoses read; "
             "the screen folds them away (--env TF_CPP_MIN_LOG_LEVEL=1 hides them, and with them that evidence)"),
    Variable("TF_CONFIG", Step.CLUSTER, _tf_config, "the cluster and this task's place in it",
             set_by="kwnb where it placed the tasks; on a Slurm node task/slurm_env.py, in a Job's pod "
                    "task/k8s_entry.py, in a TFJob's the training operator", keyed=False, per_task=True),
))


# Keras 3 on JAX (keras/src/backend/jax/distribution_lib.py: initialize): the cluster's variables are defined once,
# in task/jax_task.py, for the engine, a Slurm task and a Job's pod alike.
def _jax_cluster(name: str) -> Value:
    def value(facts: TaskFacts, env) -> str | None:
        workers = facts.config.get("cluster", {}).get("worker", []) if facts.config else []
        return cluster_variables(workers, facts.config["task"]["index"])[name] if workers else None
    return value


def _gpus_or(without: str | None, with_gpus: str | None) -> Value:
    return lambda facts, env: with_gpus if facts.gpus else without


JAX_SET_BY = ("kwnb where it placed the tasks; on a Slurm node task/slurm_env.py, in a Job's pod task/k8s_entry.py "
              "(where KERAS_BACKEND=jax)")
JAX_DEFAULTS_SET_BY = "kwnb, for every task it starts and every pod, by whether it has GPUs"
JAX = Framework("jax", (
    Variable(BACKEND_ENV, Step.DEFAULT, _always("jax"), "Keras 3 runs on JAX, whose distribution API spans "
             "processes", set_by="kwnb, for every task and pod", in_pods=True),
    Variable("JAX_PLATFORMS", Step.DEFAULT, _gpus_or("cpu", None), "without --gpus (a pod: --gpus-per-pod) the CPU "
             "only: JAX would look for GPUs and TPUs first, and say so at length", set_by=JAX_DEFAULTS_SET_BY,
             in_pods=True),
    Variable("XLA_PYTHON_CLIENT_PREALLOCATE", Step.DEFAULT, _gpus_or(None, "false"),
             "with --gpus (a pod: --gpus-per-pod) a task takes GPU memory as it needs it, not 75 % of it at start",
             set_by=JAX_DEFAULTS_SET_BY, in_pods=True),
    Variable(JOB_ADDRESSES_ENV, Step.CLUSTER, _jax_cluster(JOB_ADDRESSES_ENV),
             "the coordinator: task 0, on a free port kwnb chose for this run", set_by=JAX_SET_BY, keyed=False),
    Variable(NUM_PROCESSES_ENV, Step.CLUSTER, _jax_cluster(NUM_PROCESSES_ENV), "how many processes join",
             set_by=JAX_SET_BY, keyed=False),
    Variable(PROCESS_ID_ENV, Step.CLUSTER, _jax_cluster(PROCESS_ID_ENV), "this task's place among them (0: the "
             "coordinator)", set_by=JAX_SET_BY, keyed=False, per_task=True),
    Variable(BIND_ENV, Step.CLUSTER, _jax_cluster(BIND_ENV), "the coordinator listens on the run's network only, "
             "not on every interface (a pod's are its own network: there on every one, task/k8s_entry.py)",
             set_by=JAX_SET_BY, keyed=False),
), gpus_per_task=1)


# ----- the variables' values ----------------------------------------------------------------------------
GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"


def _devices(facts: TaskFacts, env) -> str | None:
    if facts.placement:
        return facts.placement.devices[facts.position or 0]
    return None if facts.gpus else "-1"


def _growth(facts: TaskFacts, env) -> str | None:
    return "true" if facts.placement and facts.placement.shared and GROWTH not in env else None


# TensorFlow sizes its thread pools from the machine's cores (64 threads a task on a 64-core node with one
# CPU of quota); kwnb shares the CPUs the session may use among the run's tasks instead.
def _threads(least: int = 1) -> Value:
    def value(facts: TaskFacts, env) -> str | None:
        if any(name in env for name in THREAD_VARIABLES):  # the user's choice, for all of them
            return None
        return str(max(least, int(facts.cpus // max(1, facts.tasks))))
    return value


def _temp(facts: TaskFacts, env) -> str | None:
    # One folder per user, not per run, so that the warm pool's key stays the same (machine/task_temp.py).
    return None if env.get("TMPDIR") else private_folder()


def _of_a_run(fact: Callable[[TaskFacts], object]) -> Value:
    """kwnb's own variables: only for a run's task (the warm pool and the doctor start none)."""
    return lambda facts, env: None if facts.position is None else str(fact(facts))


THREADS_SET_BY = "the local launcher and the warm pool, unless the session or the user set any of the four"
TEMP_SET_BY = "the local launcher and the warm pool, unless the session or the user set TMPDIR"
COMMON: tuple[Variable, ...] = (  # every framework's tasks get these
    Variable("PYTHONUNBUFFERED", Step.DEFAULT, _always("1"),
             "each line reaches the task's log (and `kubectl logs -f`) as it is printed",
             set_by="kwnb, for every task and pod", in_pods=True),
    Variable("MPLBACKEND", Step.DEFAULT, _always("Agg"), "the kernel's inline backend, inherited, means nothing in a task"),
    Variable("CUDA_VISIBLE_DEVICES", lambda facts: Step.PLACEMENT if facts.placement else Step.DEFAULT, _devices,
             "without --gpus none, as N tasks on one GPU would fight over its memory; with --gpus on this machine "
             "the task's share (place_gpus), over the user's own, which was the pool to choose from"),
    Variable(PARENT_PID_ENV, Step.TASK, _of_a_run(lambda facts: os.getpid()),
             "the task's watchdog ends it when the process that started it is gone (task/bootstrap.py)",
             keyed=False, per_task=True),
    Variable(RUN_DIR_ENV, Step.TASK, _of_a_run(lambda facts: facts.run_dir),
             "the run folder, where kwnb.report() and the bootstrap write (task/runfolder.py)", keyed=False),
    Variable(POSITION_ENV, Step.TASK, _of_a_run(lambda facts: facts.position),
             "the task's position in the run (0 is the chief): kwnb.report() writes there", keyed=False, per_task=True),
    Variable(GROWTH, Step.PLACEMENT, _growth,
             "tasks that share a GPU grow their memory as they need it, unless the session or the user set it"),
    Variable("TF_NUM_INTRAOP_THREADS", Step.THREADS, _threads(), "a share of the session's CPUs", set_by=THREADS_SET_BY),
    # At least 2 inter-op threads: with 1, some graphs (a cond inside a function) hang (tensorflow#38969).
    Variable("TF_NUM_INTEROP_THREADS", Step.THREADS, _threads(least=2), "a share of the session's CPUs",
             set_by=THREADS_SET_BY),
    Variable("OMP_NUM_THREADS", Step.THREADS, _threads(), "a share of the session's CPUs", set_by=THREADS_SET_BY),
    # XLA's CPU client (JAX) reads neither of the above nor XLA_FLAGS' thread options (jax 0.10: a 1500x1500 matmul
    # loop kept 1.93 cores busy with them, 1.00 with PJRT_NPROC=1); without it, one thread per core of the machine.
    Variable("PJRT_NPROC", Step.THREADS, _threads(), "a share of the session's CPUs for JAX's XLA CPU thread pool",
             set_by=THREADS_SET_BY),
    # TMPDIR for POSIX tools and Python; TEMP and TMP for the rest.
    *(Variable(name, Step.TEMP, _temp, "a temporary folder of the user's own, not the shared /tmp "
               "(machine/task_temp.py)", set_by=TEMP_SET_BY) for name in ("TMPDIR", "TEMP", "TMP")),
)
FRAMEWORKS = (TENSORFLOW, JAX)
FRAMEWORK_NAMES = tuple(framework.name for framework in FRAMEWORKS)
EVERY_VARIABLE = (*(v for framework in FRAMEWORKS for v in framework.variables), *COMMON)
THREAD_VARIABLES = tuple(v.name for v in COMMON if v.step == Step.THREADS)
NOT_KEYED = tuple(v.name for v in EVERY_VARIABLE if not v.keyed)  # may differ between a warm interpreter and its task
# Read by no import either, so a task may differ in them from the interpreter that imported for it: pytest sets the
# first anew for every test, and kwnb reads its own settings (KWNB_RUNS_DIR, ...) where it runs, a task only once it
# has taken on its own environment. A run in one test thus forks from the import a run of the test before made.
UNREAD_AT_IMPORT = ("PYTEST_CURRENT_TEST",)
KWNB_SETTINGS = "KWNB_"


def keyed(name: str) -> bool:
    """Whether a variable must be the same in a warm interpreter or a forker and in the task it serves."""
    return name not in NOT_KEYED and name not in UNREAD_AT_IMPORT and not name.startswith(KWNB_SETTINGS)


PER_TASK = tuple(v.name for v in EVERY_VARIABLE if v.per_task)  # never a whole job's (Slurm)
CLUSTER_VARIABLES = tuple(v.name for v in EVERY_VARIABLE if v.step == Step.CLUSTER)  # each task's own, where it runs


def framework_named(name: str | None) -> Framework:
    """The framework `--framework` names (TensorFlow when None)."""
    return next(framework for framework in FRAMEWORKS if framework.name == (name or TENSORFLOW.name))


# ----- the builder -------------------------------------------------------------------------------------
def rows(framework: Framework | None = None) -> tuple[Variable, ...]:
    """Every variable a task of `framework` (TensorFlow by default) may get, its framework's first in each step."""
    return (*(framework or TENSORFLOW).variables, *COMMON)


def added(env: Mapping[str, str], facts: TaskFacts, steps: Sequence[Step]) -> dict[str, str]:
    """The variables `steps` set on top of `env`, each step's values made from the environment before it."""
    env, made = dict(env), {}
    for step in steps:
        values = {v.name: value for v in rows(facts.framework) if v.step_for(facts) == step
                  if (value := v.value(facts, env)) is not None}
        env.update(values)
        made.update(values)
    return made


def task_environment(facts: TaskFacts = TaskFacts(), user: Mapping[str, str] | None = None,
                     session: Mapping[str, str] | None = None, here: bool = False) -> dict[str, str]:
    """A task's whole environment: the session's (os.environ), kwnb's variables, the user's --env, its GPUs;
    here: also what a task started on this machine adds (threads, temporary folder)."""
    env = dict(os.environ if session is None else session)
    env.update(added(env, facts, BEFORE_THE_USER))
    env.update(user or {})
    env.update(added(env, facts, (Step.PLACEMENT, *(ON_THIS_MACHINE if here else ()))))
    return env


def thread_variables(env: Mapping[str, str], tasks: int, cpus: float) -> dict[str, str]:
    """The thread variables each of `tasks` tasks started on this machine gets, or {} where the user set any."""
    return added(env, TaskFacts(tasks=tasks, cpus=cpus), (Step.THREADS,))


def temp_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The temporary folder a task started on this machine gets, or {} where the user set TMPDIR."""
    return added(env, TaskFacts(), (Step.TEMP,))


def pod_environment(user: Mapping[str, str], framework: Framework | None = None,
                    gpus: bool = False) -> dict[str, str]:
    """A pod's (it inherits nothing): kwnb's variables for every pod, then the user's, less the cluster's,
    which each pod gets where it runs; gpus: the pod has GPUs, as a task under --gpus."""
    facts = TaskFacts(gpus=gpus, framework=framework)
    env = {v.name: value for v in rows(framework) if v.in_pods if (value := v.value(facts, {})) is not None}
    env.update({name: value for name, value in user.items() if name not in CLUSTER_VARIABLES})
    return env


# ----- GPU placement ----------------------------------------------------------------------------------
# Which GPUs each task of a `--gpus` run sees (CUDA_VISIBLE_DEVICES), chosen among the session's
# (machine/gpus.py). TensorFlow maps nearly all the memory of every GPU it sees when it starts, so a second
# task on the same GPU runs out of memory; and NCCL refuses two ranks on one GPU. With at least as many GPUs
# as tasks, each task gets its own: an equal share each, since MultiWorkerMirroredStrategy wants the same
# number of devices on every worker (8 GPUs, 3 tasks: 2 each, 2 left idle). With fewer, the tasks take them
# in turn and share, each growing its memory as it needs it (GROWTH, unless the user set it), and the run
# says once that all-reduce cannot use NCCL.
def place_gpus(gpus: Sequence[str], tasks: int, most: int | None = None) -> GpuPlacement | None:
    """Each task its own GPUs (an equal share, at most `most` each) if there are enough, else one each in turn,
    shared; None if there is no GPU to place."""
    if not gpus or tasks < 1:
        return None
    if len(gpus) >= tasks:
        share = min(len(gpus) // tasks, most or len(gpus))
        return GpuPlacement(tuple(",".join(gpus[i * share:(i + 1) * share]) for i in range(tasks)), shared=False)
    return GpuPlacement(tuple(gpus[i % len(gpus)] for i in range(tasks)), shared=True)


def placement_note(placement: GpuPlacement | None, gpus: Sequence[str], source: str) -> str:
    """What the run says once about its GPUs: why it shares them, or that it found none."""
    if placement is None:
        return (f"--gpus: no GPU found ({source}); the tasks see whatever the machine shows them")
    if not placement.shared:
        return ""
    tasks = len(placement.devices)
    return (f"--gpus: {tasks} tasks share {len(gpus)} GPU{'s' * (len(gpus) != 1)} ({source}), with memory growth "
            f"({GROWTH}); all-reduce cannot use NCCL, which takes one GPU per task: leave the strategy's "
            "communication at AUTO (TensorFlow's ring all-reduce) or RING; NCCL would stop with 'Duplicate GPU detected'")


def plan_gpus(tasks: int, user_env: Mapping[str, str],
              framework: Framework | None = None) -> tuple[GpuPlacement | None, str]:
    """A --gpus run's placement on this machine, among the GPUs the session (or the run's own
    CUDA_VISIBLE_DEVICES) allows, and what the run says about it."""
    session = session_gpus({**os.environ, **user_env})
    placement = place_gpus(session.ids, tasks, (framework or TENSORFLOW).gpus_per_task)
    return placement, placement_note(placement, session.ids, session.source)
