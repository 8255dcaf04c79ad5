"""`kwnb doctor`: will a run work here, and how well? One line per check, ok or warn, each warning with its fix.

What a workshop organiser runs on the hub's image before class, or a learner pastes into a question:
the Python the tasks run; TensorFlow, tf-keras and TensorBoard and whether their versions match
(checked in a subprocess of that Python, which imports them as a task would: this process imports no
TensorFlow); the limits kwnb reads and where each comes from (machine/limits.py); whether a 2-worker
run fits in the memory left (idle warm interpreters' memory counted as left: the pool gives it back);
the warm pool; the network a run would get and why (backends/netns.py); where runs are written; for a
workshop's organiser, who uses this machine, whether each has limits of their own and is isolated
from the others, and how many 2-worker runs the machine holds at once; Slurm, where `sbatch` is on the PATH.

A warning that means a run could not work at all is `blocking`: `kwnb doctor` then exits 1.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from .backends.warm import limits_less_the_pool
from .errors import KwnbError
from .engine.live.inputs import find_python
from .engine.live.settings import DEFAULTS
from .machine.jax_check import jax_check
from .machine.limits import read_limits
from .machine.sizes import format_size
from .machine.task_env import CLUSTER_VARIABLES, task_environment
from .task import doctor_probe

PROBE_TIMEOUT = 120.0  # seconds for the subprocess that imports TensorFlow (2-5 s here, 20 s on a loaded machine)
TRAINING_MARGIN = 250 << 20  # a small model's training on top of the imports, per task (bytes)
RUN_TASKS = DEFAULTS.n  # the run doctor checks for: a default run
# Run by the tasks' Python, by path, with the environment a task gets: imports as a task would, reports as JSON.
PROBE = doctor_probe.__file__


@dataclass(frozen=True)
class Check:
    topic: str  # "python", "tensorflow", "memory", ...
    ok: bool
    text: str
    fix: str = ""  # for a warning: what to do about it
    blocking: bool = False  # a run could not work until this is fixed

    def lines(self) -> list[str]:
        head = f"{'ok' if self.ok else 'warn':<5} {self.topic:<11} {self.text}"
        return [head] + ([f"{'':17} fix: {self.fix}"] if self.fix and not self.ok else [])


def checks(python: str | None = None, environ: dict | None = None) -> list[Check]:
    """Every check, in the order they are shown. Takes a few seconds: the TensorFlow probe imports it."""
    from .version import __version__

    environ = dict(os.environ if environ is None else environ)
    found = [Check("kwnb", True, f"{__version__} at {Path(__file__).resolve().parents[1]}")]
    try:
        executable = find_python(python)
    except KwnbError as error:
        return found + [Check("python", False, str(error), "give --python a Python on the PATH, or its full path", True)]
    probe = probe_python(executable, environ)
    found += python_checks(executable, probe)
    found.append(Check("jax", *jax_check(executable, environ)))  # machine/jax_check.py: --framework jax
    limits, pool_memory = limits_less_the_pool(read_limits(environ), environ)
    found += limit_checks(limits, pool_memory)
    found.append(fit_check(limits, probe))
    found.append(pool_check(environ))
    decision = _decided(environ)  # once: three lines read it (about 0.2 s each: a namespace probe, /proc)
    found.append(network_check(environ, decision))
    found.append(reach_check(environ, decision))
    found.append(runs_dir_check())
    found += workshop_checks(limits, probe, environ, decision)
    slurm = slurm_check()
    if slurm is not None:
        found.append(slurm)
    return found


def probe_python(executable: str, environ: dict) -> dict:
    """What the tasks' Python has installed and can import, as a task would (kwnb's task environment)."""
    env = task_environment(session=environ)  # machine/task_env.py, for no run in particular
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"  # the probe's answer is its output: TensorFlow's start-up lines left out
    for name in CLUSTER_VARIABLES:  # the session's own, if it set one: a task gets its own
        env.pop(name, None)
    try:
        done = subprocess.run([executable, PROBE], capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"failed": f"{type(error).__name__}: {error}"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(doctor_probe.MARK):
            return json.loads(line[len(doctor_probe.MARK):])
    said = (done.stderr.strip().splitlines() or ["nothing"])[-1]
    return {"failed": f"exit code {done.returncode}: {said}"}


def _minor(version: str | None) -> str:
    return ".".join((version or "").split(".")[:2])


def python_checks(executable: str, probe: dict) -> list[Check]:
    install = f"{executable} -m pip install"
    if "failed" in probe:
        return [Check("python", False, f"{executable} could not run kwnb's check: {probe['failed']}",
                      "give --python a working Python 3 interpreter", True)]
    here = "the same as this process's" if os.path.realpath(executable) == os.path.realpath(sys.executable) else \
        f"this process runs {sys.version.split()[0]} ({sys.executable})"
    out = [Check("python", True, f"{probe['python']} at {probe['executable']} runs the tasks; {here}")]
    versions, errors = probe["versions"], probe["errors"]
    tf_version = versions.get("tensorflow") or versions.get("tensorflow-cpu")
    if "tensorflow" in errors:
        out.append(Check("tensorflow", False, f"cannot be imported: {errors['tensorflow']}",
                         f"{install} tensorflow tf-keras tensorboard", True))
        return out
    out.append(Check("tensorflow", True, f"{tf_version} imports in {probe['import_seconds']:.1f} s "
                                        f"({format_size(probe['peak_rss'])} per task with tf-keras)"))
    keras = versions.get("tf-keras")
    if "tf_keras" in errors or not keras:
        out.append(Check("tf-keras", False, f"missing: {errors.get('tf_keras', 'not installed')}. Keras 3 cannot run "
                         "MultiWorkerMirroredStrategy, so kwnb's tasks use tf-keras (TF_USE_LEGACY_KERAS=1)",
                         f"{install} 'tf-keras~={_minor(tf_version)}.0'", True))
    elif _minor(keras) != _minor(tf_version):
        out.append(Check("tf-keras", False, f"{keras} does not match TensorFlow {tf_version}",
                         f"{install} 'tf-keras~={_minor(tf_version)}.0'"))
    else:
        out.append(Check("tf-keras", True, f"{keras}, matches TensorFlow"))
    board = versions.get("tensorboard")
    if not board:
        out.append(Check("tensorboard", False, "not installed (TensorFlow 2.21 no longer brings it): tf.summary and "
                         "the Keras TensorBoard callback raise TBNotInstalledError",
                         f"{install} 'tensorboard~={_minor(tf_version)}.0'"))
    elif _minor(board) != _minor(tf_version):
        out.append(Check("tensorboard", False, f"{board} does not match TensorFlow {tf_version}",
                         f"{install} 'tensorboard~={_minor(tf_version)}.0'"))
    else:
        out.append(Check("tensorboard", True, f"{board}, matches TensorFlow"))
    return out


def limit_checks(limits, pool_memory: int = 0) -> list[Check]:
    pool = f" (not counting {format_size(pool_memory)} of idle warm interpreters: the pool gives it back)" \
        if pool_memory else ""
    memory = Check("memory", True, f"{format_size(limits.memory)} ({_source(limits.memory_source)}), "
                                   f"{format_size(limits.memory_used)} in use{pool}, "
                                   f"{format_size(limits.memory_available)} left")
    text = f"{limits.cpus:g} ({_source(limits.cpus_source)})"
    if limits.cpus >= RUN_TASKS:
        return [memory, Check("cpus", True, text)]
    return [memory, Check("cpus", False, f"{text}: the {RUN_TASKS} workers of a run share less than a CPU each, so "
                          "they train slower, and a chief-only collective can fail with 'Shape mismatch in the "
                          "collective instance' instead of waiting", "ask for 2 CPUs (the spawner's cpu_limit, "
                          "CPU_LIMIT), or run -n 1 to try the code")]


def _source(source: str) -> str:
    return {"machine": "the machine's: no cgroup or JupyterHub limit applies",
            "CPU affinity": "the CPUs this process may run on", "MEM_LIMIT": "$MEM_LIMIT, set by JupyterHub",
            "CPU_LIMIT": "$CPU_LIMIT, set by JupyterHub"}.get(source, source)


def fit_check(limits, probe: dict) -> Check:
    """Whether a 2-worker run fits in the memory left, from what importing TensorFlow took here."""
    per_task = probe.get("peak_rss") or 0
    if not per_task or "tensorflow" in probe.get("errors", {}):
        return Check("fit", False, "unknown: TensorFlow could not be measured", "fix the TensorFlow line above")
    need = RUN_TASKS * (per_task + TRAINING_MARGIN)
    text = (f"a {RUN_TASKS}-worker run needs about {format_size(need)} ({format_size(per_task)} to import TensorFlow "
            f"and tf-keras, {format_size(TRAINING_MARGIN)} to train a small model, per task); "
            f"{format_size(limits.memory_available)} is left")
    if need <= limits.memory_available:
        return Check("fit", True, text)
    blocking = RUN_TASKS * per_task > limits.memory_available  # not even the imports fit: the OOM killer ends it
    return Check("fit", False, text + ": the out-of-memory killer would end tasks", "ask for more memory (the "
                 "spawner's mem_limit), end other kernels (%kw_pool --stop empties the warm pool), or run -n 1", blocking)


def pool_check(environ: dict) -> Check:
    from .backends.warm import POOL, WARM_ENV

    if environ.get(WARM_ENV, "1") == "0":
        return Check("warm pool", True, f"off ({WARM_ENV}=0): every run imports TensorFlow in each task")
    idle = POOL.status()
    ready = sum(warm["ready"] for warm in idle)
    state = (f"{len(idle)} interpreter(s) in this process, {ready} ready, "
             f"{format_size(sum(w['pss'] for w in idle))} (PSS)") if idle else \
        "empty in this process (each kernel keeps its own: %kw_doctor or %kw_pool there shows it)"
    state += f"; {POOL.cap_text()}"  # the session's CPUs and memory limit decide it (backends/warm_room.py)
    if POOL.refused:
        state += f"; last refill refused: {POOL.refused}"
    return Check("warm pool", True, "on: re-runs start in interpreters that imported TensorFlow already; " + state)


def _network_decision(environ: dict):
    """(what the machine allows, who else is here, the network a run gets): the launcher's own decision."""
    from .backends import netns, network_choice
    from .machine.neighbours import neighbours

    found, others = netns.support(), neighbours(environ)
    return found, others, network_choice.choose(*network_choice.wanted(None, environ), False, found, others)


def _decided(environ: dict):
    """The launcher's network decision, or the KwnbError that keeps it from being made (a bad KWNB_NETWORK)."""
    try:
        return _network_decision(environ)
    except KwnbError as error:
        return error


def network_check(environ: dict, decision=None) -> Check:
    """The network a run gets unless it says (--network on a run wins), and why."""
    from .backends.network_choice import NETWORK_ENV, OFFLINE, lacks, outside_fix

    decision = _decided(environ) if decision is None else decision
    if isinstance(decision, KwnbError):
        return Check("network", False, str(decision), f"set {NETWORK_ENV} to private or host, or unset it", True)
    found, others, choice = decision
    head = f"{choice.network} ({choice.said_by}={choice.network})" if choice.given else f"{choice.network} by default"
    how = "no user namespace needed (root)" if not found.user_namespace else "in a user namespace"
    if choice.network == "private" and not found.possible:
        return Check("network", False, f"{head}, but kwnb cannot make a private network here ({found.forbidden_by}): "
                     "every run fails to start", f"unset {NETWORK_ENV} (runs then use the host's network), or allow "
                     "user namespaces", True)
    if choice.network == "private" and found.complete:
        return Check("network", True, f"{head}: each run in a network namespace of its own, {how}, outside access "
                     f"through {found.tool}")
    if choice.network == "private":
        return Check("network", False, f"{head}: each run in a network namespace of its own, {how}, that "
                     f"{lacks(found)}" + ("" if choice.given else f" (private since {choice.why})"),
                     f"{outside_fix(found)}: until then {OFFLINE}")
    exposed = f"the tasks' unauthenticated gRPC ports are open to {others.who() or 'other hosts'}"
    if choice.given:
        return Check("network", False, f"{head}: {exposed}", f"unset {NETWORK_ENV} to isolate runs" +
                     ("" if found.complete else " where possible"))
    if not found.possible:
        return Check("network", False, f"{head}: kwnb cannot make a private network here ({found.forbidden_by}); "
                     f"{exposed}", "allow user namespaces (sysctl kernel.unprivileged_userns_clone=1, or the "
                     "container's seccomp profile), or firewall the ports")
    return Check("network", False, f"{head}: {choice.why}",
                 f"{outside_fix(found)}; or --network private for runs that download nothing")


def reach_check(environ: dict, decision=None) -> Check:
    """Whether anyone else could connect to a run's tasks: other users of this machine, other hosts."""
    decision = _decided(environ) if decision is None else decision
    if isinstance(decision, KwnbError):
        return Check("reach", False, "unknown until the network line above is fixed")
    found, others, choice = decision
    who = others.who()
    if choice.network == "private":
        return Check("reach", True, "nobody else can connect to the tasks: each run's network is private" +
                     (f" (here: {who})" if who else ""))
    if not who:
        return Check("reach", True, "no one else seen: no JupyterHub, no other account's processes or logins, no "
                     "public address; hosts on this machine's own network can still connect to the tasks")
    return Check("reach", False, f"{who} can connect to the tasks' ports and run code as you",
                 _reach_fix(found, choice))


def _reach_fix(found, choice) -> str:
    return ("unset KWNB_NETWORK" if choice.given and found.possible else "the organiser can allow unprivileged "
            "user namespaces (then each run is private)" if not found.possible else "--network private")


def workshop_checks(limits, probe: dict, environ: dict, decision=None) -> list[Check]:
    """For an organiser: who uses this machine, whether each has limits of their own and is isolated
    from the others, and how many 2-worker runs the machine holds at once."""
    decision = _decided(environ) if decision is None else decision
    decision = None if isinstance(decision, KwnbError) else decision
    others = decision[1] if decision else None
    return [_users_check(others), _own_limits_check(limits, others), _isolation_check(decision), _capacity_check(probe)]


def _users_check(others) -> Check:
    if others is None:
        return Check("workshop", True, "users: unknown until the network line above is fixed")
    uids, accounts = [os.geteuid(), *others.other_uids], len(others.other_uids) + 1
    text = (f"users: {accounts} account{'s' * (accounts != 1)} with processes or logins here (uid "
            f"{', '.join(map(str, uids[:6]))}{', ...' * (accounts > 6)}, yours first)")
    if others.hub:
        text += f"; ${others.hub} is set: learners in containers of their own are not seen from here"
    return Check("workshop", True, text)


def _own_limits_check(limits, others) -> Check:
    """Whether the limits are each user's own and enforced: a cgroup's are; JupyterHub's variables only say
    them. A warning only where others use this machine: a laptop's owner needs no limit against themselves."""
    text = (f"limits per user: memory {format_size(limits.memory)} ({_source(limits.memory_source)}), "
            f"{limits.cpus:g} CPU{'s' * (limits.cpus != 1)} ({_source(limits.cpus_source)})")
    unlimited = [name for name, source in (("memory", limits.memory_source), ("CPUs", limits.cpus_source))
                 if not source.startswith("cgroup")]
    if not unlimited:
        return Check("workshop", True, text + ": enforced by the kernel")
    if others is not None and not others.on_this_machine:
        return Check("workshop", True, text + ": no one else uses this machine")
    return Check("workshop", False, f"{text}: no cgroup limits {' or '.join(unlimited)} here, so one learner's run "
                 "can take them from everyone", "have the spawner enforce mem_limit and cpu_limit (a cgroup: "
                 "DockerSpawner, KubeSpawner or SystemdSpawner)")


def _isolation_check(decision) -> Check:
    """Reach, seen from the workshop: the network decision the launcher makes (the reach line above says who)."""
    if decision is None:
        return Check("workshop", False, "learners isolated: unknown until the network line above is fixed")
    found, others, choice = decision
    if choice.network == "private":
        return Check("workshop", True, "learners isolated from each other: each run's network is private")
    if not others.present:
        return Check("workshop", True, "learners isolated: no one else seen (reach above); runs use the host's "
                     "network")
    return Check("workshop", False, "learners not isolated: runs use the host's network, where the others can "
                 "connect to each other's tasks (reach above)", _reach_fix(found, choice))


def _capacity_check(probe: dict) -> Check:
    """2-worker runs the machine holds at once, by its memory and CPUs, with the per-task numbers of the fit line."""
    per_task = probe.get("peak_rss") or 0
    if not per_task or "tensorflow" in probe.get("errors", {}):
        return Check("workshop", False, "capacity: unknown until TensorFlow can be measured",
                     "fix the TensorFlow line above")
    run = RUN_TASKS * (per_task + TRAINING_MARGIN)
    memory, cores = psutil.virtual_memory().total, psutil.cpu_count() or 1
    by_memory, by_cpus = memory // run, cores // RUN_TASKS
    held = min(by_memory, by_cpus)
    return Check("workshop", held >= 1, f"capacity: this machine holds {held} {RUN_TASKS}-worker "
                 f"run{'s' * (held != 1)} at once: {by_memory} by its memory ({format_size(memory)}, "
                 f"{format_size(run)} per run), {by_cpus} by its {cores} CPU{'s' * (cores != 1)} (one per worker); "
                 "a kernel's full warm pool takes about its run's memory while idle",
                 "a bigger machine, or runs with -n 1")


def runs_dir_check() -> Check:
    from .task.runfolder import default_runs_dir

    folder = default_runs_dir(Path.cwd())
    existing = next((p for p in [folder, *folder.parents] if p.exists()), None)
    if existing is not None and os.access(existing, os.W_OK | os.X_OK):
        return Check("runs", True, f"written under {folder}")
    return Check("runs", False, f"cannot write {folder}", "run from a folder you can write to, or set KWNB_RUNS_DIR",
                 True)


def slurm_check() -> Check | None:
    """Only where `sbatch` is on the PATH: the other commands kwnb uses, and whether the controller answers."""
    if not shutil.which("sbatch"):
        return None
    missing = [name for name in ("squeue", "scancel", "sinfo") if not shutil.which(name)]
    if missing:
        return Check("slurm", False, f"sbatch found, but not {', '.join(missing)}", "install Slurm's client commands")
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%P %a %D"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Check("slurm", False, f"sinfo did not answer: {error}", "check that slurmctld is reachable")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["nothing"])[-1]
        return Check("slurm", False, f"sinfo failed: {said}", "check that slurmctld runs and that SLURM_CONF names its slurm.conf (scontrol ping)")
    partitions = [line.split()[0] for line in done.stdout.splitlines() if line.split()]
    return Check("slurm", True, f"--backend slurm can submit: partitions {', '.join(partitions) or 'none listed'}")


def report(found: list[Check]) -> str:
    """The screen: one line per check, its fix below a warning, and the verdict."""
    lines = [line for check in found for line in check.lines()]
    blocking = [check.topic for check in found if check.blocking]
    warned = sum(not check.ok for check in found)
    if blocking:
        lines.append(f"kwnb doctor: a run cannot work here until {', '.join(blocking)} is fixed")
    else:
        lines.append("kwnb doctor: a run can work here" + (f" ({warned} warning{'s' * (warned != 1)} above)"
                                                              if warned else ""))
    return "\n".join(lines)


def exit_code(found: list[Check]) -> int:
    return 1 if any(check.blocking for check in found) else 0
