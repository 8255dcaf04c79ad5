"""A warm interpreter: what its script needs of TensorFlow already imported, waiting for one task to run
(issue 15).

Started by the kernel's pool (kwnb/backends/warm.py) after a run ends, with the environment the next
run's tasks will have, less what differs per task (TF_CONFIG, kwnb's own variables). It imports what the pool
names (argv[2], comma-separated: TensorFlow and tf-keras for a script that uses them, nothing for one
that does not; TensorFlow and tf-keras when not given), then reads one job from stdin, a JSON line: the
task's argv, its complete environment, its working directory and its log. It then becomes that task: the
environment replaced, stdout and stderr on the log, stdin on /dev/null, and the script run by the
bootstrap in a fresh `__main__`, exactly as a cold start runs it. Used once: TensorFlow keeps state. End
of input (the pool emptied, the kernel gone) ends it; so does the bootstrap's parent watchdog.

The imports run at low priority (argv[1], a niceness: 19 from the pool) in a thread of their own:
Linux applies niceness per thread, and an unprivileged process cannot raise its priority back, so the
main thread, which becomes the task, keeps the kernel's priority.

Standard library only, like all of kwnb/task/.
"""
import json
import os
import sys
import threading

READY = "kwnb-warm: ready"  # written to the pool's log once the imports are done


def warm_up(nice: int = 0, modules: tuple = ("tensorflow", "tf_keras")) -> None:
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)  # this thread only
        except OSError:
            pass
    for name in modules:
        try:
            __import__(name)
        except Exception as error:  # the task will import it itself and say what is wrong
            print(f"kwnb-warm: could not import {name}: {type(error).__name__}: {error}", flush=True)
    print(READY, flush=True)


def become(job: dict) -> str:
    """Take on the task's environment, working directory, files and argv; returns its script."""
    from kwnb.task.runfolder import PARENT_PID_ENV

    os.environ.clear()
    os.environ.update(job["env"])
    os.environ.pop(PARENT_PID_ENV, None)  # the watchdog already watches the kernel, as in a cold start
    os.chdir(job["cwd"])
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, target in ((0, null), (1, log), (2, log)):
        os.dup2(target, fd)
    os.close(log)
    os.close(null)
    script = job["argv"][0]
    sys.argv = list(job["argv"])
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    return script


def main() -> None:
    del sys.path[0]  # kwnb/task/: its modules must not stand in for anything TensorFlow imports
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from kwnb.task import bootstrap, lean_imports

    lean_imports.install()  # before the warm-up's `import tensorflow`, as in a cold task
    bootstrap.watch_parent()
    modules = tuple(filter(None, sys.argv[2].split(","))) if len(sys.argv) > 2 else ("tensorflow", "tf_keras")
    importer = threading.Thread(target=warm_up, args=(int(sys.argv[1]) if len(sys.argv) > 1 else 0, modules))
    importer.start()
    importer.join()
    line = sys.stdin.readline()
    if not line.strip():
        return  # the pool let this interpreter go unused
    bootstrap.run(become(json.loads(line)))


if __name__ == "__main__":
    main()
