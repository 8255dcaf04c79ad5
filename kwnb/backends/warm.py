"""Warm starts: a pool of interpreters that have already imported what the next run's script imports
of TensorFlow, one per task of the last run (two, for the default `-n 2`, when the extension is
loaded) up to the session's cap, so that running a cell skips the 2.4-4 s `import tensorflow` costs
per worker here. A script that imports no TensorFlow gets interpreters that import nothing
(warm_room.warm_imports reads the script's imports; it never runs it).

Rules that keep it correct and cheap:
- A warm interpreter serves a task only if it was started with the same Python and the same
  environment, apart from what may differ (`key`: machine/task_env.py's `keyed`: what differs per task, and what
  no import reads): TF_CPP_MIN_LOG_LEVEL or TF_ENABLE_ONEDNN_OPTS are read at import, CUDA_VISIBLE_DEVICES at device
  set-up. Otherwise the task starts cold, and the next refill builds the pool for the new key.
- Used once (TensorFlow keeps state); refilled only when no run of this process is active, and
  only when other work leaves the CPUs quiet (an import must not compete with anyone's training),
  at nice 19; never more than 2 per CPU (at least 2) nor than the session's memory limit holds once
  each has become a task, with some to spare (warm_room.cap); emptied after 10 idle minutes
  and at exit. Each warm interpreter runs the bootstrap's parent watchdog, so a SIGKILLed kernel
  leaves none behind.
- Local backend only. Under `--network private` the pool keeps its interpreters in a private
  network of its own, made in advance, which the next run adopts (backends/netns.py).

Which lock guards what: `Pool._lock` guards all of the pool's state (the idle interpreters, the
active runs, what to refill for, the generation, the log folder, the timer, the adopted network, the
words for %kw_pool); it is never held while a process starts or stops. A refill starts interpreters without it,
then adds them only if no stop() or run_started() came meanwhile (the generation is unchanged).
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..machine.limits import memory_cgroup_of, read_limits
from ..machine.task_env import NOT_KEYED, keyed
from ..task.process_group import OWN_PROCESS_GROUP
from ..task.runfolder import PARENT_PID_ENV
from . import netns, warm_room
from .base import BOOTSTRAP, TaskLaunch

WARM_SCRIPT = str(Path(__file__).parents[1] / "task" / "warm.py")
_WARM_SCRIPT_TAIL = os.path.join("kwnb", "task", "warm.py")  # any kwnb install's: another kernel may use another
WARM_ENV = "KWNB_WARM"  # 0 turns warm starts off for this process
IDLE_SECONDS = 600.0
NICE = 19  # warm interpreters import at the lowest priority; the task then runs at the kernel's (task/warm.py)
QUIET_RETRY = 2.0  # seconds between looks at the CPUs while a refill waits for other work to quieten
LOG_FOLDER_PREFIX = "kwnb-warm-"  # the pool's own logs: a warm interpreter writes there until it becomes a task


def can_serve(launch: TaskLaunch) -> bool:
    """Whether a process that imported ahead (a warm interpreter, a fork of a shared import) may stand in for the
    task's: its argv is kwnb's bootstrap run by the interpreter itself. Not when a launcher wraps the argv, nor when
    `--python` is a script around an interpreter: what they do per task, a process started ahead would skip."""
    return launch.argv == [launch.python, "-u", BOOTSTRAP, launch.script, *launch.args] \
        and not _is_script(launch.python)


@functools.lru_cache(maxsize=16)
def _is_script(python: str) -> bool:
    try:
        with open(python, "rb") as program:
            return program.read(2) == b"#!"
    except OSError:
        return False


def key(python: str, env: dict[str, str]) -> str:
    """What a warm interpreter must share with a task to serve it."""
    kept = sorted((k, v) for k, v in env.items() if keyed(k))
    return hashlib.sha256(json.dumps([os.path.realpath(python), kept]).encode()).hexdigest()[:16]


@dataclass
class Warm:
    popen: subprocess.Popen
    key: str
    log: Path
    imports: tuple[str, ...] = warm_room.WARM_IMPORTS  # what it imports while it waits
    network: "netns.PrivateNetwork | None" = None  # the private network it waits in, if any
    started_at: float = field(default_factory=time.time)

    @property
    def ready(self) -> bool:
        try:
            return "kwnb-warm: ready" in self.log.read_text(errors="replace")
        except OSError:
            return False

    def pss(self) -> int:
        try:
            return psutil.Process(self.popen.pid).memory_full_info().pss
        except (psutil.Error, AttributeError):
            return 0

    def end(self) -> None:
        try:
            self.popen.stdin.close()  # end of input: it exits by itself
        except OSError:
            pass
        try:
            self.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class Pool:
    def __init__(self):
        self._lock = threading.Lock()  # guards every attribute below; never held while a process starts or stops
        self._filling = threading.Lock()  # one refill at a time (it takes _lock inside, never the other way)
        self._idle: list[Warm] = []
        self._active: set[int] = set()  # the launchers of the local runs going now
        self._wanted: tuple | None = None  # (key, python, env, cwd, count, private, imports) to refill for
        self._generation = 0  # bumped by stop() and run_started(): a refill begun before adds nothing
        self._last_used = time.monotonic()
        self.refused = ""  # why the pool is not (yet) full, in words
        self.cap_reason = ""  # the pool's cap and why, in words (from the session's limits: warm_room.py)
        self._folder: Path | None = None  # the warm interpreters' own logs (imports), made with the first
        self._timer: threading.Timer | None = None
        self._claimed: "netns.PrivateNetwork | None" = None  # the pool's network a running run adopted

    @staticmethod
    def enabled() -> bool:
        return os.environ.get(WARM_ENV, "1") != "0"

    # ----- the launcher's side --------------------------------------------------------------------
    def run_started(self, launcher) -> None:
        """A local run starts (warm or cold): no refill until it ends, and a refill under way adds
        nothing (it ends what it started). A relaunch starts it again: no matter."""
        with self._lock:
            self._active.add(id(launcher))
            self._generation += 1

    def run_ended(self, launcher, launches: list[TaskLaunch], private: bool = False) -> None:
        """A run of this process ended: remember what it launched (if it may start warm), refill when no
        run is active."""
        imports = warm_room.warm_imports(launches[0].script, launches[0].env) if launches else ()  # reads files: not under the lock
        with self._lock:
            self._active.discard(id(launcher))
            if launches:
                first = launches[0]
                self._wanted = (key(first.python, first.env), first.python, base_env(first.env), first.cwd,
                                len(launches), private, imports)
            idle = not self._active
            # Interpreters left in a network a run adopted are the run's no more: end them with it.
            leftovers = [w for w in self._idle if w.network is not None and w.network is self._claimed]
            self._idle = [w for w in self._idle if w not in leftovers]
            self._claimed = None
        for warm in leftovers:
            warm.end()
        if idle and launches:  # (a launcher passes its launches only when it started warm-capable)
            self._refill_soon()

    def prepare(self, python: str, env: dict[str, str], cwd: str, count: int, private: bool,
                imports: tuple[str, ...] = warm_room.WARM_IMPORTS) -> None:
        """Fill the pool ahead of a first run (e.g. when the extension is loaded), unless a run has
        already said what it wants."""
        with self._lock:
            if self._wanted is not None:
                return
            self._wanted = (key(python, env), python, base_env(env), cwd, count, private, imports)
        self._refill_soon()

    def _refill_soon(self) -> None:
        threading.Thread(target=self.refill, name="kwnb-warm-refill", daemon=True).start()

    def claim_network(self) -> "netns.PrivateNetwork | None":
        """A private network the pool made with warm interpreters waiting in it, for a run to adopt:
        from now on the run's launcher owns it (and closes it); its interpreters stay offered by `take`."""
        with self._lock:
            network = next((w.network for w in self._idle if w.network is not None and w.network.alive), None)
            if network is not None:
                self._claimed = network
            return network

    def take(self, launch: TaskLaunch, held_back: frozenset, network=None) -> subprocess.Popen | None:
        """A warm interpreter now running this task, or None (start it cold): one in the task's network (this
        machine's or the one the run adopted) that imported none of `held_back` (warm_room.held_back)."""
        wanted = key(launch.python, launch.env)
        with self._lock:
            match = next((w for w in self._idle if w.key == wanted and w.network is network
                          and not held_back & set(w.imports) and w.popen.poll() is None), None)
            if match is None:
                return None
            self._idle.remove(match)
            self._last_used = time.monotonic()
        job = {"argv": launch.argv[3:], "env": launch.env, "cwd": launch.cwd, "log": str(launch.log_path)}
        try:
            match.popen.stdin.write((json.dumps(job) + "\n").encode())
            match.popen.stdin.close()
        except OSError:
            return None  # it died meanwhile: start cold
        return match.popen

    def memory(self) -> int:
        """What the idle interpreters take (PSS): theirs to keep when they become a run's tasks."""
        with self._lock:
            idle = list(self._idle)
        return sum(w.pss() for w in idle)

    # ----- filling and emptying -------------------------------------------------------------------
    def refill(self) -> None:
        """Fill the pool up to its cap, at low priority, once the CPUs are quiet; in a thread of its own."""
        with self._filling:
            plan = self._plan()
            if plan is None:
                return
            generation, (wanted_key, python, env, cwd, count, private, imports), kept = plan
            network = next((w.network for w in kept if w.network is not None), None)
            missing, note = self._room(count, kept, imports)
            if missing <= 0 or not self._wait_for_quiet(generation, [w.popen.pid for w in kept], note):
                return
            made = private and network is None
            if made:
                try:
                    network = netns.PrivateNetwork().start()
                except Exception as error:  # no network, no pool: the next run starts cold and makes its own
                    with self._lock:
                        self.refused = f"no warm interpreters kept: could not make their private network ({error})"
                    return
            network = network if private else None
            started = [warm for _ in range(missing)
                       if (warm := self._start(generation, wanted_key, python, env, cwd, imports, network))
                       is not None]
            if self._add(generation, started):
                return
            if made and not started:
                network.close()
            else:
                _end_all(started, keep=None if made else network)

    def _plan(self) -> tuple | None:
        """(generation, what to refill for, the idle interpreters kept), having ended the stale ones."""
        with self._lock:
            if self._wanted is None or self._active:
                return None
            wanted_key, private, imports = self._wanted[0], self._wanted[5], self._wanted[6]
            stale = [w for w in self._idle if w.key != wanted_key or w.popen.poll() is not None
                     or (w.network is not None) != private or w.imports != imports]
            self._idle = [w for w in self._idle if w not in stale]
            plan = self._generation, self._wanted, list(self._idle)
        _end_all(stale, keep=next((w.network for w in plan[2] if w.network is not None), None))
        return plan

    def _add(self, generation: int, started: list[Warm]) -> bool:
        """Add what a refill started, unless the pool was stopped or a run began meanwhile (then False:
        they are nobody's, and the caller ends them; the log folder goes if the pool is empty)."""
        with self._lock:
            if self._generation == generation and started:
                self._idle += started
                self._arm_idle_timer()
                return True
            folder, self._folder = (self._folder, None) if not self._idle else (None, self._folder)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        return False

    def _room(self, count: int, kept: list[Warm], imports: tuple[str, ...]) -> tuple[int, str]:
        """How many interpreters to start, up to `count` within the session's limits (warm_room.cap),
        and what to say when that is fewer than `count`."""
        room = warm_room.cap(read_limits(), sum(w.pss() for w in kept), imports)
        note = "" if room.count >= count else (
            f"{room.count} of the {count} wanted kept: {room.why}" if room.count else
            f"no warm interpreters kept: {room.why}")
        with self._lock:
            self.cap_reason, self.refused = room.why, note
        return min(count, room.count) - len(kept), note

    def _wait_for_quiet(self, generation: int, pool_pids: list[int], note: str) -> bool:
        """Wait until other work leaves the CPUs quiet (warm_room.others_busy); False if the pool was
        stopped, a run began, or it stayed busy for IDLE_SECONDS."""
        limits, deadline = read_limits(), time.monotonic() + IDLE_SECONDS
        while True:
            busy = warm_room.others_busy(pool_pids, limits)
            with self._lock:
                if self._generation != generation:
                    return False
                late = time.monotonic() > deadline
                self.refused = note if not busy else (f"no refill: {busy} (waited {IDLE_SECONDS:.0f} s)" if late
                                                      else f"refill waiting for the CPUs to be quiet: {busy}")
            if not busy or late:
                return not busy
            time.sleep(QUIET_RETRY)

    def _start(self, generation: int, wanted_key: str, python: str, env: dict, cwd: str, imports: tuple[str, ...],
               network=None) -> Warm | None:
        """One interpreter, importing `imports` at nice NICE; None if the pool was stopped or a run began meanwhile."""
        with self._lock:
            if self._generation != generation:
                return None
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix=LOG_FOLDER_PREFIX))
            log = self._folder / f"warm-{time.time_ns()}.log"
        env = {**env, PARENT_PID_ENV: str(os.getpid())}  # its watchdog: it ends when this process does
        argv = [python, "-u", WARM_SCRIPT, str(NICE), ",".join(imports)]
        with open(log, "ab") as out:  # in a group of its own: it becomes the task, whose group kwnb signals
            popen = subprocess.Popen(network.enter(argv) if network else argv, stdin=subprocess.PIPE, stdout=out,
                                     stderr=subprocess.STDOUT, env=env, cwd=cwd, **OWN_PROCESS_GROUP)
        return Warm(popen, wanted_key, log, imports, network)

    def _arm_idle_timer(self) -> None:  # called with _lock held
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(IDLE_SECONDS, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            idle_long = time.monotonic() - self._last_used >= IDLE_SECONDS - 1
        if idle_long:
            self.stop()

    def stop(self) -> int:
        """Empty the pool (a refill under way adds nothing); returns how many interpreters it ended."""
        with self._lock:
            self._generation += 1
            idle, self._idle, self._wanted = self._idle, [], None
            folder, self._folder = self._folder, None
            claimed = self._claimed
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        _end_all(idle, keep=claimed)
        if folder is not None:  # handed-off interpreters write to their task's log, not here
            shutil.rmtree(folder, ignore_errors=True)
        return len(idle)

    def cap_text(self) -> str:
        """The pool's cap and why, in words: the last refill's, else what the session's limits allow now."""
        with self._lock:
            said, wanted = self.cap_reason, self._wanted
        imports = wanted[6] if wanted else warm_room.WARM_IMPORTS
        return said or warm_room.cap(read_limits(), self.memory(), imports).why

    def status(self) -> list[dict]:
        with self._lock:
            idle = list(self._idle)
        return [{"pid": w.popen.pid, "ready": w.ready, "age": time.time() - w.started_at, "pss": w.pss(),
                 "key": w.key, "imports": w.imports} for w in idle]


def limits_less_the_pool(limits, environ: dict):
    """(the limits with the idle warm interpreters' memory counted as left, that memory): it is in the
    limit's usage, but the pool gives it back, as the next run's tasks or when emptied (issue 30: a
    569 MB interpreter made a run that peaked at 1174 of 2048 MiB look like an out-of-memory kill)."""
    if environ.get(WARM_ENV, "1") == "0":
        return limits, 0
    in_group = limits.cgroup is not None and limits.memory_source.startswith("cgroup")  # the group's usage counts them
    pool = min(idle_memory(limits.cgroup.path if in_group else None), limits.memory_used)
    return dataclasses.replace(limits, memory_used=limits.memory_used - pool), pool


def idle_memory(within: Path | None = None) -> int:
    """What the idle warm interpreters of this user take (PSS), every kernel's pool, not only this
    process's: memory counted in use that the pool gives back, since each becomes a task of the next
    run (or ends). `within`: only those in this memory cgroup (where the limit counts them). Idle: its
    output still goes to the pool's log (become() points it at the task's log)."""
    uid, total = os.getuid(), 0
    for process in psutil.process_iter(["uids", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if not process.info["uids"] or process.info["uids"].real != uid or len(cmdline) < 2 \
                or not any(part.endswith(_WARM_SCRIPT_TAIL) for part in cmdline):
            continue
        try:
            idle = LOG_FOLDER_PREFIX in os.readlink(f"/proc/{process.pid}/fd/1")
            group = memory_cgroup_of(process.pid) if within is not None else None
            if idle and (within is None or (group is not None and group.path == within)):
                total += process.memory_full_info().pss
        except (OSError, psutil.Error, AttributeError):
            pass  # ended meanwhile, or not ours to read
    return total


def _end_all(interpreters: list[Warm], keep=None) -> None:
    """End interpreters, and the private networks they leave empty (not one a run has adopted)."""
    for warm in interpreters:
        warm.end()
    for network in {id(w.network): w.network for w in interpreters if w.network is not None}.values():
        if network is not keep:
            network.close()


def base_env(env: dict[str, str]) -> dict[str, str]:
    """What a warm interpreter (or a shared import) starts with: the task's environment less what may differ."""
    return {k: v for k, v in env.items() if k not in NOT_KEYED}


POOL = Pool()
atexit.register(POOL.stop)
