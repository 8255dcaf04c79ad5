"""Runs a worker's script as `python script.py` would, with a watchdog on the process that started it.

Started by path (not `-m kwnb...`), so it needs only the standard library and works with any
`--python`. If the kernel dies, even by SIGKILL where no atexit handler runs, the worker is
re-parented; the watchdog sees that and ends the worker's whole process group.
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
    parent = os.environ.pop("KWNB_PARENT_PID", None)
    if parent:
        threading.Thread(target=_watch_parent, args=(int(parent),), daemon=True, name="kwnb-watchdog").start()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.path.append(package_parent)  # `import kwnb` (for kwnb.report) even under another Python
    # Not runpy.run_path: under it the worker's `import tensorflow` cost ~0.3 s more CPU, kwnb's
    # whole bring-up gap against a bare Popen (benchmarks/README.md). A fresh `__main__` module,
    # as `python script.py` makes, also lets pickle find classes and functions the script defines.
    slurm = _slurm_task() if "KWNB_SLURM_TASKS" in os.environ else None
    if slurm is not None:
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


def _slurm_task():
    """kwnb/_slurm_task.py, loaded by path: `import kwnb` would pull in the engine's dependencies."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_slurm_task.py")
    spec = importlib.util.spec_from_file_location("_kwnb_slurm_task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
