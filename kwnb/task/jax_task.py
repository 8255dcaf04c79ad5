"""Inside a task of a `--framework jax` run (Keras 3 on JAX across processes), before the script runs: two
things JAX leaves unsaid or undone. Standard library only, like all of kwnb/task/.

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
JAX_LOGGER = "jax._src.distributed"


def in_a_jax_run() -> bool:
    return bool(os.environ.get(JOB_ADDRESSES_ENV))


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
