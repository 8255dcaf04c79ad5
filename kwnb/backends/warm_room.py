"""How much warm pool this session has room for, what its interpreters import, and when to fill it:
the pool's size from the session's own limits (kwnb/machine/limits.py: its cgroup, JupyterHub's
MEM_LIMIT/CPU_LIMIT, else the machine's), and whether the CPUs are quiet enough to import TensorFlow
beside other people's work.

- What: the script's own imports, read with `ast` (never run), its local modules' too: TensorFlow
  (and tf-keras, keras) only for a script that uses it; a script that does not gets bare interpreters
  (kwnb's bootstrap, about 10 MB each). Issue 38: 33 idle interpreters (1.56 GB) each imported
  TensorFlow after a 64-task run of a script that never did.
- Size: the smallest of the run's task count, PER_CPU per CPU (at least MIN_WARM, so that a 2-worker
  run starts fully warm on one CPU, as on Binder) and what fits, once each has become a task, in the
  memory left under the limit with SPARE_MEMORY to spare. The CPUs bound it because a run of more
  tasks than that shares them anyway, while every idle interpreter keeps its memory from the session
  (the kernel, the painter, on Binder the Jupyter server) for up to 10 minutes. How many the next run
  needs is the pool's (warm.py).
- Quiet: other work (everything but the pool itself) uses at most half of the CPUs, both of the
  session's group (when its CPUs are limited and its usage can be read) and of the machine: on a
  shared server, one kernel's refill must not slow another's training.
"""
from __future__ import annotations

import ast
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from .. import python_source
from ..machine.limits import Limits, cgroup_of, read_limits
from ..machine.sizes import format_size
from ..machine.task_env import legacy_keras
from ..task.jax_task import BACKEND_ENV

# What a TensorFlow task takes once it trains: peak RSS 729 MB for each task of a small tf-keras
# MultiWorkerMirroredStrategy fit here (tests/scripts/warm_probe.py, benchmarks/workloads/train.py,
# TF 2.21; RSS counts the shared libraries in every task, so on the safe side). A task of a script that
# imports no TensorFlow: a Python with kwnb's bootstrap (about 10 MB here) and room for a few imports.
TASK_MEMORY = 730 * 10**6
LIGHT_TASK_MEMORY = 60 * 10**6
SPARE_MEMORY = 250 * 10**6  # the kernel's own growth while the next run goes (its dashboard, its reading)
PER_CPU = 2  # warm interpreters per CPU of the session: 4 on this 2-core machine, 2 on Binder's one
MIN_WARM = 2  # a 2-worker run (the tutorials', `-n 2`) starts fully warm even on one CPU
TENSORFLOW = ("tensorflow", "tf_keras", "keras")  # a script importing any of these is a TensorFlow script
WARM_IMPORTS = ("tensorflow", "tf_keras")  # what a TensorFlow script's warm interpreter imports (as tf.keras may)
# A --framework jax task's (KERAS_BACKEND=jax, machine/task_env.py): JAX and Keras 3, about 240 MB, and TensorFlow
# only where the script imports it too (tf.data); importing them leaves JAX's backend uninitialised, so that
# keras.distribution.initialize() still works in the task.
JAX_IMPORTS = ("jax", "keras")
MAX_SCANNED = 50  # local modules read, at most, to find what a script imports (a few ms each)
BUSY_SHARE = 0.5  # other work above this share of the CPUs: no refill now
QUIET_WINDOW = 1.0  # seconds over which CPU use is measured
SAMPLES = 10  # looks at the runnable threads within the window


@dataclass(frozen=True)
class Cap:
    count: int  # interpreters the pool may hold
    why: str  # in words, for %kw_pool


def cap(limits: Limits, pool_memory: int = 0, imports: tuple[str, ...] = WARM_IMPORTS) -> Cap:
    """The most interpreters the pool may hold now: the fewer of PER_CPU per CPU (at least MIN_WARM) and
    what fits in memory once each has become a task. `pool_memory`: what its idle interpreters already
    take, counted in the limit's usage but theirs to use as tasks. `imports`: what each imports."""
    task_memory = TASK_MEMORY if imports else LIGHT_TASK_MEMORY
    room = max(0, limits.memory_available + pool_memory - SPARE_MEMORY)
    by_memory, by_cpus = room // task_memory, max(MIN_WARM, int(PER_CPU * limits.cpus))
    tasks = f"{'training ' if imports else ''}task{'s' if by_memory != 1 else ''}{'' if imports else ' without TensorFlow'}"
    memory_words = (f"memory for {by_memory} {tasks} of {format_size(task_memory)} ({format_size(room + SPARE_MEMORY)} "
                    f"left of {format_size(limits.memory)}, {limits.memory_source}, less {format_size(SPARE_MEMORY)} spare)")
    cpu_words = (f"{by_cpus} for the {limits.cpus:g} CPU{'s' if limits.cpus != 1 else ''} ({limits.cpus_source}; "
                 f"{PER_CPU} per CPU, at least {MIN_WARM})")
    if by_memory <= by_cpus:
        return Cap(by_memory, f"at most {by_memory}, by the memory: {memory_words}; the CPUs allow {cpu_words}")
    return Cap(by_cpus, f"at most {by_cpus}, by the CPUs: {cpu_words}; the memory has room for more: {memory_words}")


def warm_imports(script: str | None, env: dict | None = None) -> tuple[str, ...]:
    """What a warm interpreter for `script` imports: WARM_IMPORTS (and keras, if the script uses it) for a
    script that imports TensorFlow, nothing for one that does not; under Keras on JAX (`env`'s KERAS_BACKEND),
    JAX_IMPORTS for a script that imports jax or keras, and TensorFlow only if it imports that too, but nothing
    for one that sets JAX's settings in os.environ. Never what the script must import itself (held_back). No script
    yet (the first cell, not written): a TensorFlow one, as the tutorials'."""
    if script is None:
        return WARM_IMPORTS
    found = script_imports(script)
    if found is None:  # unreadable or not Python: as the estimate below reads it
        found = {name for name in TENSORFLOW if re.search(rf"\b{name}\b", _text(script) or "tensorflow")}
    held = held_back(script, env)
    if (env or {}).get(BACKEND_ENV) == "jax" and found & set(JAX_IMPORTS):
        if "jax" in held:  # a JAX_ setting the script makes: nothing, TensorFlow included (as before held_back)
            return ()
        imports = JAX_IMPORTS + (("tensorflow",) if "tensorflow" in found else ())
    elif not found & set(TENSORFLOW):
        return ()
    else:
        imports = WARM_IMPORTS + (("keras",) if "keras" in found else ())
    return tuple(name for name in imports if name not in held)


def held_back(script: str | None, env: dict | None = None) -> frozenset[str]:
    """The modules the script's tasks must import themselves, because their import reads a variable the script
    sets in os.environ: jax (JAX_ENABLE_X64, JAX_PLATFORMS, ...) and Keras on it; Keras (KERAS_BACKEND); and then
    TensorFlow too, which imports Keras 3 itself unless TF_USE_LEGACY_KERAS is on (kwnb's default for TensorFlow
    runs). A warm interpreter or a kept forker that imported one of them cannot serve such a script's tasks."""
    sets = set_variables(script) if script else set()
    held = set()
    if any(name.startswith("JAX_") for name in sets):  # jax reads them at import: the task's own must see them
        held |= {"jax", "keras"}
    if BACKEND_ENV in sets:  # read by `import keras`
        held.add("keras")
    if "keras" in held and not legacy_keras(env or {}):
        held |= {"tensorflow", "tf_keras"}
    return frozenset(held)


def script_imports(script: str) -> set[str] | None:
    """The top-level names of the modules a script imports (anywhere in it: a function's imports
    count), and those its local modules (next to it) import in turn; None if it cannot be parsed."""
    folder, seen, found, queue = Path(script).resolve().parent, set(), set(), [Path(script).resolve()]
    while queue and len(seen) < MAX_SCANNED:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = python_source.parse(_text(path), str(path))
        except (SyntaxError, ValueError, TypeError):  # (TypeError: no text, unreadable)
            if len(seen) == 1:
                return None  # the script itself
            continue
        dotted = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                dotted |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                dotted |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        found |= {name.split(".")[0] for name in dotted}
        queue += [local for name in dotted for local in _local_files(folder, name)]
    return found


def set_variables(script: str) -> set[str]:
    """The environment variables the script sets in os.environ by name (os.environ[...] = , setdefault, update,
    os.putenv). Some are read when a module is imported: jax reads JAX_ENABLE_X64, JAX_PLATFORMS, ... and Keras
    KERAS_BACKEND, so in an interpreter that imported them before the script ran they would be ignored. (XLA_FLAGS
    is read later, when a backend is first initialized.)"""
    try:
        tree = python_source.parse(_text(script), str(script))
    except (SyntaxError, ValueError, TypeError):
        return set()
    names = set()
    for node in ast.walk(tree):
        keys: list = []
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _is_environ(node.value):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            if (method == "putenv" or (method == "setdefault" and _is_environ(owner))) and node.args:
                keys = [node.args[0]]
            elif method == "update" and _is_environ(owner):
                keys = [ast.Constant(k.arg) for k in node.keywords if k.arg] + \
                       [key for arg in node.args if isinstance(arg, ast.Dict) for key in arg.keys]
        names |= {str(key.value) for key in keys if isinstance(key, ast.Constant)}
    return names


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def _local_files(folder: Path, dotted: str) -> list[Path]:
    """The files next to the script that importing `dotted` runs (a.py, a/__init__.py, a/b.py, ...): a
    local module may import TensorFlow itself."""
    parts, files = dotted.split("."), []
    for end in range(1, len(parts) + 1):
        base = folder.joinpath(*parts[:end])
        files += [path for path in (base.with_name(base.name + ".py"), base / "__init__.py") if path.is_file()]
    return files


def _text(path) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def run_memory(script: str, count: int) -> int:
    """A rough estimate of what a run of `count` tasks of `script` takes once training."""
    return count * (TASK_MEMORY if warm_imports(script) else LIGHT_TASK_MEMORY)


def fit_warning(script: str, count: int, pool_memory: int = 0, limits: Limits | None = None) -> str:
    """One line when a run will likely not fit in what is left of the memory limit, else ""."""
    limits = limits or read_limits()
    need, left = run_memory(script, count), limits.memory_available + pool_memory
    if need <= left:
        return ""
    return (f"this run may not fit in memory: {count} task{'s' if count != 1 else ''} need about "
            f"{format_size(need)} once training, and {format_size(left)} is left of the {format_size(limits.memory)} "
            f"limit ({limits.memory_source}); it goes ahead, but an out-of-memory kill would be no surprise")


# ----- quiet CPUs ------------------------------------------------------------------------------------
def _own_cpu_usage() -> float | None:
    """CPU seconds used so far by this process's CPU cgroup (v1 cpuacct.usage, v2 cpu.stat), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        if "cpuacct" in names:
            for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                usage = _read(Path("/sys/fs/cgroup", mount, path.lstrip("/"), "cpuacct.usage"))
                if usage is not None:
                    return int(usage) / 1e9
        elif controllers == "":
            stat = _read(Path("/sys/fs/cgroup", path.lstrip("/"), "cpu.stat")) or ""
            found = re.search(r"^usage_usec (\d+)", stat, re.M)
            if found:
                return int(found.group(1)) / 1e6
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _machine_busy() -> float:
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + getattr(times, "irq", 0) + getattr(times, "softirq", 0)


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            total += sum(process.cpu_times()[:4])  # user, system and their children's
        except psutil.Error:
            pass
    return total


def _machine_running() -> int:
    """Threads running or waiting for a CPU on the machine now (/proc/stat procs_running)."""
    found = re.search(r"^procs_running (\d+)", _read(Path("/proc/stat")) or "", re.M)
    return int(found.group(1)) if found else 0


def _running_in(group_procs: Path, excluded: set[int]) -> int:
    """Threads running or runnable now in a group's processes, less the excluded processes'."""
    running = 0
    for pid in (_read(group_procs) or "").split():
        if int(pid) in excluded:
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            stat = _read(Path(f"/proc/{pid}/task/{tid}/stat")) or ""
            running += stat.rpartition(")")[2].split()[:1] == ["R"]
    return running


def others_busy(pool_pids: list[int], limits: Limits, window: float = QUIET_WINDOW) -> str:
    """Why the CPUs are too busy for a refill now (other work than the pool's), or "" when quiet.

    Both what other work used (CPU time) and what it asked for (runnable threads, sampled 10 times):
    under contention a trainer gets less than it wants, and its usage alone would look quiet."""
    cores, group = psutil.cpu_count() or 1, cgroup_of("cpu")
    procs = group[0].path / "cgroup.procs" if group and limits.cpus < cores else None
    excluded = {os.getpid(), *pool_pids}
    machine, session, pool = _machine_busy(), _own_cpu_usage(), _cpu_of(pool_pids)
    machine_wanted = session_wanted = 0
    for _ in range(SAMPLES):
        time.sleep(window / SAMPLES)
        machine_wanted += max(0, _machine_running() - 1)  # less this thread, which is running to look
        session_wanted += _running_in(procs, excluded) if procs else 0
    pool = _cpu_of(pool_pids) - pool
    machine_others = max(_machine_busy() - machine - pool, 0.0) / window
    machine_others = max(machine_others, machine_wanted / SAMPLES)
    if machine_others > BUSY_SHARE * cores:
        return f"other work uses {machine_others:.1f} of this machine's {cores} CPUs"
    if procs is not None:
        used = (_own_cpu_usage() or 0.0) - session - pool if session is not None else 0.0
        session_others = max(used / window, session_wanted / SAMPLES)
        if session_others > BUSY_SHARE * limits.cpus:
            return f"other work uses {session_others:.1f} of the session's {limits.cpus:g} CPU{'s' * (limits.cpus != 1)}"
    return ""
