"""benchmarks/patches.py's copy of kwnb/_bootstrap.py, with runpy replaced (see main()).

Runs a worker's script as `python script.py` would, with a watchdog on the process that started it.

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
            # Only a group of our own is ours to end (the launcher starts each worker in a new session).
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
    # What the benchmark proposes instead of runpy.run_path: the same `__main__` module semantics,
    # without runpy (under which `import tensorflow` costs the worker about 0.3 s more CPU).
    with open(script, "rb") as handle:
        code = compile(handle.read(), script, "exec")
    module = types.ModuleType("__main__")
    module.__file__ = script
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


if __name__ == "__main__":
    main()
