"""Runs a worker's script as `python script.py` would, with a watchdog on the process that started it,
and the two things kwnb's diagnoses need from inside: every thread's stack on a signal
(faulthandler, into the run folder, not the log) and the TF_CONFIG the script sets itself, if it does.

Started by path (not `-m kwnb...`), so it needs only the standard library and works with any
`--python`; `import kwnb` here loads only the task side (kwnb/task/), never the engine. If the
kernel dies, even by SIGKILL where no atexit handler runs, the worker is re-parented; the watchdog
sees that and ends the worker's whole process group.
"""
import _collections_abc
import atexit
import faulthandler
import gc
import json
import os
import signal
import sys
import threading
import time
import types


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            # Only a group of our own is ours to end (the local launcher makes each worker a process group leader).
            if os.getpgid(0) == os.getpid():
                os.killpg(os.getpid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # not kwnb/task/: its modules are not the user's
    sys.path.append(PACKAGE_PARENT)  # `import kwnb` (for kwnb.report) even under another Python
    from kwnb.task import lean_imports

    lean_imports.install()  # before the script's `import tensorflow`: no jax unless the script wants it
    watch_parent()
    run(script)


def watch_parent() -> None:
    """End this task's whole process group when the process that started it is gone."""
    from kwnb.task.runfolder import PARENT_PID_ENV

    parent = os.environ.pop(PARENT_PID_ENV, None)  # popped: the script's own children are not watched
    if parent:
        threading.Thread(target=_watch_parent, args=(int(parent),), daemon=True, name="kwnb-watchdog").start()


def run(script: str) -> None:
    """Run the script as `python script.py` would; sys.argv and sys.path[0] are already the script's.

    Not runpy.run_path: under it the worker's `import tensorflow` cost ~0.3 s more CPU, kwnb's
    whole bring-up gap against a bare Popen (benchmarks/README.md). A fresh `__main__` module,
    as `python script.py` makes, also lets pickle find classes and functions the script defines.
    """
    from kwnb.task.runfolder import SLURM_TASKS_ENV

    # Registered first, so it runs last, after the script's own exit handlers and TensorFlow's: the collection
    # Python makes as it shuts down then skips every object alive by then. It walked TensorFlow's import to free
    # what the process was about to give back anyway: 1.2-1.6 of the 5-7 CPU-s a bare `import tensorflow, tf_keras`
    # process took here. (Python does not promise to finalize objects still alive at exit.)
    atexit.register(gc.freeze)
    slurm = None
    if SLURM_TASKS_ENV in os.environ:
        from kwnb.task import slurm_env as slurm

        slurm.enter()  # before anything prints: from here on, output goes to the task's log
    _instrument()
    sys.excepthook = _traceback_from_the_script
    from kwnb.task import jax_task

    if jax_task.in_a_jax_run():
        jax_task.prepare(_traceback_from_the_script)  # its joins shown, no hang at exit after an uncaught error
    with open(script, "rb") as handle:
        code = compile(handle.read(), script, "exec")
    module = types.ModuleType("__main__")
    module.__file__, module.__builtins__, module.__spec__ = script, __builtins__, None
    sys.modules["__main__"] = module
    if slurm is None:
        exec(code, module.__dict__)
        return
    exit_code = 1  # an uncaught exception: Python exits with 1 after the traceback
    try:
        exec(code, module.__dict__)
        exit_code = 0
    except SystemExit as exit_:
        exit_code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        raise
    finally:
        slurm.record_exit(exit_code)


def _traceback_from_the_script(kind, value, tb) -> None:
    """An uncaught exception's traceback as `python script.py` prints it, from the script's first frame:
    kwnb's own frames (this module's `exec`, the warm interpreter's) said nothing to the learner and took
    a line of the few a summary shows. A script may set its own hook; then that one prints."""
    ours = os.path.dirname(os.path.abspath(__file__))
    first = tb
    while first is not None and os.path.dirname(os.path.abspath(first.tb_frame.f_code.co_filename)) == ours:
        first = first.tb_next
    first = first or tb  # an error in kwnb's own code keeps its whole traceback
    # The exception's own __traceback__ is what Python prints (the hook's argument alone is not enough).
    sys.__excepthook__(kind, value.with_traceback(first) if value is not None else value, first)


def _instrument() -> None:
    """Stacks on a signal, crashes' stacks in the log, and a record of a TF_CONFIG the script sets."""
    from kwnb.task.runfolder import POSITION_ENV, RUN_DIR_ENV, STACKS_SIGNAL_NAME, RunFolder

    from kwnb.task.sidecar import show_evaluator_progress

    faulthandler.enable()  # a segfault or abort prints every thread's stack into the log
    show_evaluator_progress()  # a sidecar evaluator says which checkpoint it evaluates (kwnb/task/sidecar.py)
    run_dir, position = os.environ.get(RUN_DIR_ENV), os.environ.get(POSITION_ENV)
    if not run_dir or position is None:
        return
    folder = RunFolder(run_dir)
    try:  # kept open for the process's life: faulthandler writes from a signal handler
        stacks = open(folder.stacks(position), "a")
    except OSError:
        return
    stacks_signal = getattr(signal, STACKS_SIGNAL_NAME)
    # Ignored, not its default action (to end the process), is what faulthandler puts back when Python's shutdown
    # removes its handler: a task asked for its stacks as it exited (a chief waiting in TensorFlow's shutdown for a
    # peer already gone) ended -12 instead of with its own code. Children the script starts do not inherit it: a
    # handled signal is reset to its default on exec.
    signal.signal(stacks_signal, signal.SIG_IGN)
    faulthandler.register(stacks_signal, file=stacks, all_threads=True)
    given = os.environ.get("TF_CONFIG")

    def watch_tf_config(event, args):
        # os.environ[...] = ... calls putenv, and del/pop/clear call unsetenv, each raising its audit event;
        # one string compare per event.
        if event not in ("os.putenv", "os.unsetenv") or args[0] not in ("TF_CONFIG", b"TF_CONFIG"):
            return
        value = None if event == "os.unsetenv" else args[1].decode() if isinstance(args[1], bytes) else args[1]
        if value != given:
            with open(folder.tf_config_set(position), "w") as record:
                json.dump({"tf_config": value, "deleted": value is None, "time": time.time(), **_caller()}, record)

    sys.addaudithook(watch_tf_config)


def _caller() -> dict:
    """The file and line that changed os.environ: the first frame outside os, the mapping ABCs and this hook
    (os and _collections_abc are frozen modules from Python 3.11: their frames name "<frozen os>")."""
    skipped = {"<frozen os>", "<frozen _collections_abc>", os.__file__, _collections_abc.__file__, __file__}
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in skipped:
        frame = frame.f_back
    return {"file": frame.f_code.co_filename, "line": frame.f_lineno} if frame is not None else {}


if __name__ == "__main__":
    main()
