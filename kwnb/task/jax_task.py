"""Inside a task of a `--framework jax` run (Keras 3 on JAX across processes). Standard library only, like all
of kwnb/task/.

The variables keras.distribution.initialize() reads, made from the cluster's addresses: one definition for the
engine (machine/task_env.py, where kwnb placed the tasks) and for a Slurm task that learns them on its node
(task/slurm_env.py). Task 0 is the coordinator; jax.distributed binds it to JAX_COORDINATOR_BIND_ADDRESS, else to
every interface ("[::]:port", jax/_src/distributed.py), where any host that reaches the machine could join.

Before the script runs, two things JAX leaves unsaid or undone:

- jax.distributed logs when a process starts or joins the coordination service ("Connecting to JAX distributed
  service on localhost:PORT") at INFO, which Python shows nowhere by default: shown here, so that the task's
  log says when it began joining (the engine reads it: engine/readers/jax_messages.py).
- An uncaught exception in one process leaves it hung at exit for 300 s: JAX's atexit shutdown waits at a
  barrier for the others, which wait for it in turn (measured with jax 0.10). The task exits with 1 right
  after the traceback instead, as `python script.py` would without JAX, and the run's failure policy ends
  the others.
"""
import logging
import os
import sys

JOB_ADDRESSES_ENV = "KERAS_DISTRIBUTION_JOB_ADDRESSES"  # set for every task of a JAX run (machine/task_env.py)
NUM_PROCESSES_ENV = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_ENV = "KERAS_DISTRIBUTION_PROCESS_ID"
BIND_ENV = "JAX_COORDINATOR_BIND_ADDRESS"
BACKEND_ENV = "KERAS_BACKEND"
JAX_LOGGER = "jax._src.distributed"


def cluster_variables(workers: list, index: int) -> dict:
    """Task `index`'s variables, of the workers' addresses (host:port) in order: the first is the coordinator."""
    return {JOB_ADDRESSES_ENV: workers[0], NUM_PROCESSES_ENV: str(len(workers)), PROCESS_ID_ENV: str(index),
            BIND_ENV: workers[0]}


def in_a_jax_run() -> bool:
    return bool(os.environ.get(JOB_ADDRESSES_ENV))


def keras_on_jax(environ) -> bool:
    """A task of a JAX run before its cluster variables are made: every task and pod of one gets KERAS_BACKEND=jax
    (machine/task_env.py), from which a Slurm task (task/slurm_env.py) and a Job's pod (task/k8s_entry.py) make
    keras.distribution's variables where a TensorFlow task makes TF_CONFIG."""
    return environ.get(BACKEND_ENV) == "jax"


def prepare(excepthook) -> None:
    """Show jax.distributed's joins and let an uncaught exception end the process (`excepthook` prints it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("jax: %(message)s"))
    logger = logging.getLogger(JAX_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def print_and_exit(kind, value, tb):
        excepthook(kind, value, tb)
        if not issubclass(kind, (SystemExit, KeyboardInterrupt)):
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    sys.excepthook = print_and_exit
