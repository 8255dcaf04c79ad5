"""Runs a worker's script as `python script.py` would, with a watchdog on the process that started it.

Started by path (not `-m kwnb...`), so it needs only the standard library and works with any
`--python`; `import kwnb` here loads only the task side (kwnb/task/), never the engine. If the
kernel dies, even by SIGKILL where no atexit handler runs, the worker is re-parented; the watchdog
sees that and ends the worker's whole process group.
"""
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


def main() -> None:
    script = sys.argv[1]
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # not kwnb/task/: its modules are not the user's
    sys.path.append(package_parent)  # `import kwnb` (for kwnb.report) even under another Python
    from kwnb.task.runfolder import PARENT_PID_ENV, SLURM_TASKS_ENV

    parent = os.environ.pop(PARENT_PID_ENV, None)
    if parent:
        threading.Thread(target=_watch_parent, args=(int(parent),), daemon=True, name="kwnb-watchdog").start()
    # Not runpy.run_path: under it the worker's `import tensorflow` cost ~0.3 s more CPU, kwnb's
    # whole bring-up gap against a bare Popen (benchmarks/README.md). A fresh `__main__` module,
    # as `python script.py` makes, also lets pickle find classes and functions the script defines.
    slurm = None
    if SLURM_TASKS_ENV in os.environ:
        from kwnb.task import slurm_env as slurm

        slurm.enter()  # before anything prints: from here on, output goes to the task's log
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


if __name__ == "__main__":
    main()
