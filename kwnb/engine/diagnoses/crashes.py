"""`native_crash`: a task that faulted in compiled code (TensorFlow's, JAX's, NumPy's: SIGSEGV, SIGBUS, SIGILL,
SIGFPE, SIGABRT), told with where its Python stood, from the faulthandler dump every task prints
(engine/readers/fault_dump.py). Such a signal is the process's own fault, not a kill from outside: `killed` leaves
it here. Measured: Keras 3 under tf.distribute.MirroredStrategy on TF 2.21 faulted in about 1 run of 8 on a busy
2-core machine, as fit began its validation pass (keras/src/trainers/epoch_iterator.py, in reset), and never on a
quiet one (0 in 11): a race inside TensorFlow, which a second run does not meet."""
from __future__ import annotations

from ..tasks.view import TaskView
from .diagnosis import FAULTS, Diagnosis, Look, signal_name
from ...machine.sizes import format_size

FIX = ("the fault is in a compiled library (TensorFlow, JAX, NumPy, ...), not in the script's Python. Run it again: "
       "a race inside the library often does not repeat. If it does, at the same place, update or pin the "
       "library that the innermost frame names, and look for a known issue with the lines `%kw_logs` shows")


def is_fault(returncode: int | None) -> bool:
    """A task ended by a signal the process raises on itself when its compiled code faults."""
    return returncode is not None and returncode < 0 and -returncode in FAULTS


def native_crash(task: TaskView, look: Look) -> Diagnosis | None:
    signals = task.signals
    if not is_fault(task.returncode) or task.stop_requested or task.killed_by_kwnb or task.bind_failed:
        return None  # (port_taken says it: a JAX coordinator whose port was taken dies of SIGSEGV)
    if signals.peer_reports or signals.gloo_failure or signals.coordination_timeout or look.explained(task.position):
        return None  # a runtime that aborts once its peer is gone: peer_lost, jax_peer_lost or a root cause says it
    number = -task.returncode
    cause = f"{task.id} crashed with {signal_name(number)} ({FAULTS[number]})"
    evidence = [f"exit code {task.returncode}"]
    crash = signals.native_crash[1] if signals.native_crash else None
    where = ""
    if crash is not None:
        evidence += list(crash.lines[:12])
        inner = crash.innermost
        if crash.user_frame is not None:
            where = f" at {crash.user_frame}" + (f" (its innermost Python frame: {inner})"
                                                  if inner is not None and inner != crash.user_frame else "")
        elif inner is not None:
            where = f" in {inner}"
    peak = f"; peak memory {format_size(task.peak_rss)}" if task.peak_rss else ""
    return Diagnosis("native_crash", task.position, f"{cause}{where}{peak}: {FIX}", evidence=evidence, cause=cause,
                     ended={task.position: f"crashed with {signal_name(number)}"})
