"""One interpreter that imports what a run's script needs of TensorFlow once, then forks each of the run's
tasks from itself (kwnb/backends/shared_import.py starts it, and may keep it for the process's next runs): a
2-task run pays one `import tensorflow` (about 3.5 CPU-s on a quiet core, 6.5 under load) instead of two, and
its tasks share the imported pages; a run that a kept forker serves pays none.

It forks only after the imports, from its main thread, and never runs TensorFlow itself: a forked task starts
as a cold one would after `import tensorflow`, with nothing initialized (no context, no device, no server).

Its protocol, one line each way:
- stdin, from the kernel: a job as JSON, `{"id": n, "argv": [...], "env": {...}, "cwd": ..., "log": ...}` (what a
  warm interpreter reads, kwnb/task/warm.py), plus `"namespaces": [paths]` for a run in a private network, which
  the fork joins before anything else (the forker stays outside: it may serve a run in another network next);
  or `{"cancel": n, "signal": s}` for a job not yet forked (a signal to a forked task goes to its process group,
  from the kernel). End of input: no more jobs; it exits once its tasks have ended.
- argv: what to import (comma-separated). Its stderr (the import's output) is a file, copied to the start of each
  task's log.
- stdout, to the kernel: `kwnb-warm: ready` (kwnb/task/warm.py's), `forked <n> <pid>`, `ended <n> <code>`
  (`subprocess`'s returncode: negative for a signal); anything else it prints (an import that failed) is for its
  log.

Each task leads a process group of its own and watches this process, which watches the kernel: when the
kernel goes (even by SIGKILL), this ends every task's group and then itself, and a task whose forker is gone
ends its own group (kwnb/task/bootstrap.py's watchdog).
"""
import gc
import json
import os
import select
import signal
import stat
import sys
import threading
import time
import warnings

FORKED, ENDED = "forked", "ended"
IMPORTS = ("tensorflow", "tf_keras")  # when not given: a warm interpreter's (kwnb/task/warm.py)
POLL_SECONDS = 0.1  # between looks for ended tasks while no job comes


class Forker:
    def __init__(self, importer: threading.Thread):
        self.importer = importer
        self.pending: list[dict] = []  # jobs that wait for the imports
        self.children: dict[int, int] = {}  # pid -> job id
        self.closed = False  # end of input
        self._buffer = b""

    def say(self, *words) -> None:
        os.write(1, (" ".join(map(str, words)) + "\n").encode())

    def serve(self) -> dict | None:
        """Serve until the input ends and every task has ended (None), or return a job in the forked child."""
        while not (self.closed and not self.children and not self.pending):
            self._read(POLL_SECONDS if not self.closed else 0)
            if not self.importer.is_alive():
                while self.pending:
                    job = self.pending.pop(0)
                    if self._fork(job):
                        return job
            self._reap(block=self.closed and not self.pending)
        return None

    def _read(self, timeout: float) -> None:
        if self.closed:
            return
        if not select.select([0], [], [], timeout)[0]:
            return
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the run has ended (or the kernel has gone): nothing more to start
            self.closed = True
            for job in self.pending:
                self.say(ENDED, job["id"], -signal.SIGKILL)
            self.pending.clear()
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in filter(None, (line.strip() for line in lines)):
            message = json.loads(line)
            if "cancel" in message:
                self._cancel(message["cancel"], message.get("signal", signal.SIGKILL))
            else:
                self.pending.append(message)

    def _cancel(self, job_id: int, signum: int) -> None:
        waiting = [job for job in self.pending if job["id"] == job_id]
        for job in waiting:
            self.pending.remove(job)
            self.say(ENDED, job_id, -signum)

    def _fork(self, job: dict) -> bool:
        """Fork the job's task; True in the child."""
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # the import's objects, out of the collector's reach: a task's collections and its exit would
        # otherwise walk them all, copying every page they touch (an exit took 1.8 CPU-s forked, 0.4 frozen)
        with warnings.catch_warnings():  # Python 3.12+ warns of other threads: TensorFlow's idle ones, the watchdog
            # (only this thread comes across; forked once the imports are done, so no import holds Python's import lock)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)  # a group of its own, as a cold task's (kwnb/task/process_group.py)
            return True
        try:
            os.setpgid(pid, pid)  # here too: the kernel may signal the group before the child has made it
        except OSError:
            pass
        self.children[pid] = job["id"]
        self.say(FORKED, job["id"], pid)
        return False

    def _reap(self, block: bool) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            job_id = self.children.pop(pid, None)
            if job_id is not None:
                self.say(ENDED, job_id, os.waitstatus_to_exitcode(status))
            block = False  # one blocking wait, then whatever else has ended

    def end_tasks(self) -> None:
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _watch_kernel(forker: Forker, kernel: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != kernel:
            forker.end_tasks()
            os._exit(1)


def main() -> None:
    del sys.path[0]  # kwnb/task/: its modules must not stand in for anything TensorFlow imports
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from kwnb.task import bootstrap, lean_imports, warm
    from kwnb.task.runfolder import PARENT_PID_ENV

    lean_imports.install()  # before `import tensorflow`, as in a cold task
    modules = tuple(filter(None, sys.argv[1].split(","))) if len(sys.argv) > 1 else IMPORTS
    importer = threading.Thread(target=warm.warm_up, args=(0, modules), name="kwnb-imports")
    importer.start()
    forker = Forker(importer)
    kernel = os.environ.pop(PARENT_PID_ENV, None)
    if kernel:
        threading.Thread(target=_watch_kernel, args=(forker, int(kernel)), daemon=True, name="kwnb-watchdog").start()
    job = forker.serve()
    if job is None:
        return
    # The forked task: only this thread came across the fork (joining a user namespace needs that: setns(2)).
    _enter(job)
    forker_pid = os.getppid()  # watched, as a cold task watches the kernel
    threading.Thread(target=bootstrap._watch_parent, args=(forker_pid,), daemon=True, name="kwnb-watchdog").start()
    _copy_import_output(job["log"])
    bootstrap.run(warm.become(job))


def _enter(job: dict) -> None:
    """Join the run's private network (its namespaces' paths, in order: kwnb/backends/netns.py), as `nsenter` does
    for a cold task; a task that cannot must not run outside it (others could connect to it): it ends, saying why."""
    for path in job.get("namespaces", ()):
        try:
            descriptor = os.open(path, os.O_RDONLY)
            try:
                _setns(descriptor)
            finally:
                os.close(descriptor)
        except OSError as error:
            with open(job["log"], "a") as log:
                log.write(f"kwnb: could not enter the run's private network ({path}): {error}\n")
            os._exit(1)


def _setns(descriptor: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(descriptor)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(descriptor, 0) != 0:  # 0: whatever kind of namespace the descriptor is
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _copy_import_output(log: str) -> None:
    """What the import printed (TensorFlow's start-up lines) first in the task's log, as a cold task's shows it: the
    forker's stderr is a file with no name (shared_import.py), read here from its start, before the task's own
    output replaces it."""
    try:
        if not stat.S_ISREG(os.fstat(2).st_mode):
            return
        with open(log, "ab") as target:
            offset = 0
            while chunk := os.pread(2, 1 << 16, offset):
                target.write(chunk)
                offset += len(chunk)
    except OSError:
        pass


if __name__ == "__main__":
    main()
