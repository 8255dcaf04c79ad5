"""`kwnb doctor` and `%kw_doctor` (kwnb/doctor.py): the truth about this machine, inside a limited
cgroup and under JupyterHub's variables, and a broken case that exits 1 with its fix."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from kwnb.backends import netns, network_choice
from kwnb import doctor
from kwnb.machine.limits import read_limits
from kwnb.machine.neighbours import neighbours
from kwnb.machine.sizes import format_size
from test_limits import _real_v1_group as real_v1_group  # a real cgroup v1 group, made as root (or a skip)

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "KWNB_NETWORK": ""}
# The doctor in a fresh process that must not import TensorFlow itself: its probe subprocess does.
IN_PROCESS = ("import sys; from kwnb.cli import main; code = main(['doctor', *sys.argv[1:]]); "
              "print('TENSORFLOW IMPORTED' if 'tensorflow' in sys.modules else 'no tensorflow here'); sys.exit(code)")


def kwnb_doctor(*args: str, prefix: list[str] = (), env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-c", IN_PROCESS, *args], capture_output=True, text=True,
                          timeout=300, env=env or ENV, cwd=ROOT)


def line_of(out: str, topic: str) -> str:
    return next(line for line in out.splitlines() if line[6:].startswith(topic + " "))


def test_on_this_machine_it_tells_the_truth_and_imports_no_tensorflow():
    done = kwnb_doctor()
    out = done.stdout
    assert out.strip().endswith("no tensorflow here"), out
    assert line_of(out, "tensorflow").startswith("ok") and metadata.version("tensorflow") in line_of(out, "tensorflow")
    assert metadata.version("tf-keras") in line_of(out, "tf-keras")
    limits = read_limits()
    assert f"{format_size(limits.memory)} (" in line_of(out, "memory")
    assert line_of(out, "cpus").split()[2] == f"{limits.cpus:g}"
    found = netns.support()  # what a run gets here: the launcher's decision, from this machine and who else is on it
    others = neighbours(ENV)
    chosen = network_choice.choose(None, "", False, found, others).network
    assert f"network     {chosen} by default: " in line_of(out, "network"), out
    assert line_of(out, "reach").startswith("ok" if chosen == "private" or not others.present else "warn"), out
    assert ("slurm" in out) == bool(__import__("shutil").which("sbatch"))
    blocking = "a run cannot work here" in out
    assert done.returncode == (1 if blocking else 0), out
    assert not blocking  # this machine runs the suite: TensorFlow and tf-keras are installed


def test_a_python_without_tensorflow_exits_1_with_the_fix(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare = tmp_path / "bare" / "bin" / "python"
    done = kwnb_doctor("--python", str(bare))
    assert done.returncode == 1, done.stdout
    tf_line = line_of(done.stdout, "tensorflow")
    assert tf_line.startswith("warn") and "No module named 'tensorflow'" in tf_line
    assert f"fix: {bare} -m pip install tensorflow tf-keras tensorboard" in done.stdout
    assert "a run cannot work here until tensorflow is fixed" in done.stdout
    missing = kwnb_doctor("--python", str(tmp_path / "nowhere" / "python3"))
    assert missing.returncode == 1 and "Python interpreter not found" in line_of(missing.stdout, "python")


def test_jupyterhub_variables_are_the_limits_and_a_small_one_is_a_warning():
    limits = read_limits({"MEM_LIMIT": str(GiB), "CPU_LIMIT": "1"})
    memory, cpus = doctor.limit_checks(limits)
    assert memory.ok and "1.0 GiB ($MEM_LIMIT, set by JupyterHub)" in memory.text
    assert not cpus.ok and cpus.text.startswith("1 ($CPU_LIMIT, set by JupyterHub)") and "CPU_LIMIT" in cpus.fix
    probe = {"peak_rss": 640 << 20, "errors": {}}
    fit = doctor.fit_check(limits, probe)
    assert not fit.ok and fit.blocking == (2 * (640 << 20) > limits.memory_available) and "mem_limit" in fit.fix
    roomy = doctor.fit_check(read_limits({"MEM_LIMIT": str(64 * GiB)}), probe)
    assert roomy.ok and "a 2-worker run needs about 1.7 GiB" in roomy.text


def test_inside_a_limited_cgroup_it_reports_that_group_and_what_does_not_fit():
    memory, cpu = real_v1_group("memory"), real_v1_group("cpu")
    try:
        (memory / "memory.limit_in_bytes").write_text(str(GiB + GiB // 4))
        (cpu / "cpu.cfs_period_us").write_text("100000")
        (cpu / "cpu.cfs_quota_us").write_text("100000")
        enter = f'echo $$ > {memory}/cgroup.procs && echo $$ > {cpu}/cgroup.procs && exec "$@"'
        done = kwnb_doctor(prefix=["sh", "-c", enter, "sh"])
        out = done.stdout
        assert "1.2 GiB (cgroup v1 memory.limit_in_bytes)" in line_of(out, "memory"), out + done.stderr
        assert line_of(out, "cpus").startswith("warn  cpus        1 (cgroup v1 cpu.cfs_quota_us)")
        assert line_of(out, "tensorflow").startswith("ok")  # its import fits in the group
        assert line_of(out, "fit").startswith("warn") and "out-of-memory killer" in line_of(out, "fit")
        assert "fix: ask for more memory" in out and "fix: ask for 2 CPUs" in out
        assert done.returncode == (1 if "a run cannot work here until fit" in out else 0)
    finally:
        for group in (memory, cpu):
            group.rmdir()


def test_the_magic_prints_the_same_screen(tmp_path, monkeypatch):
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "kwnb")
    monkeypatch.setattr(doctor, "probe_python", lambda executable, environ: {
        "python": "3.11.7", "executable": executable, "versions": {"tensorflow": "2.21.0"},
        "errors": {"tf_keras": "ModuleNotFoundError: No module named 'tf_keras'"}, "import_seconds": 3.0,
        "peak_rss": 600 << 20})
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    shell.run_line_magic("kw_doctor", "")
    screen = "\n".join(printed)
    assert "warn  tf-keras" in screen and "-m pip install 'tf-keras~=2.21.0'" in screen
    assert "warn  tensorboard" in screen and "TBNotInstalledError" in screen
    assert screen.endswith("a run cannot work here until tf-keras is fixed")


def test_a_private_network_that_cannot_be_made_blocks_runs(monkeypatch):
    monkeypatch.setattr(netns, "support", lambda: netns.Support("a seccomp filter", "", True))
    blocked = doctor.network_check({"KWNB_NETWORK": "private"})
    assert not blocked.ok and blocked.blocking and "unset KWNB_NETWORK" in blocked.fix
    host = doctor.network_check({})
    assert not host.ok and not host.blocking and host.text.startswith("host by default: kwnb cannot make a private network")
    assert "user namespaces" in host.fix


# In a 2 GiB group, as on Binder: the pool's two idle interpreters are in the group's usage, but theirs to give back.
WITH_A_FULL_POOL = """
import json, os, sys, time
for procs in sys.argv[1:3]:
    with open(procs, "w") as handle:
        handle.write(str(os.getpid()))
from kwnb import doctor
from kwnb.backends import warm, warm_room
from kwnb.machine.limits import read_limits
warm_room.BUSY_SHARE = float("inf")  # how much, not when (tests/test_warm_pool.py)
env = dict(os.environ)
warm.POOL.prepare(sys.executable, env, os.getcwd(), 2, False)
deadline = time.monotonic() + 240
while sum(w["ready"] for w in warm.POOL.status()) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
probe = doctor.probe_python(sys.executable, env)
raw = read_limits(env)
limits, pool = doctor.limits_less_the_pool(raw, env)
memory, _ = doctor.limit_checks(limits, pool)
print("RESULT " + json.dumps({"ready": len(warm.POOL.status()), "pss": warm.POOL.memory(), "pool": pool,
                              "used": raw.memory_used, "left": limits.memory_available, "memory": memory.text,
                              "fit": doctor.fit_check(limits, probe).text, "fit_ok": doctor.fit_check(limits, probe).ok,
                              "old_fit_ok": doctor.fit_check(raw, probe).ok}), flush=True)
warm.POOL.stop()
"""


@pytest.mark.slow
@pytest.mark.timeout(450)
def test_idle_warm_interpreters_count_as_memory_left(tmp_path):
    """Issue 30: the doctor counted a 569 MB warm interpreter as memory in use and warned of the OOM killer."""
    memory, cpu = real_v1_group("memory"), real_v1_group("cpu")
    try:
        (memory / "memory.limit_in_bytes").write_text(str(2 * GiB))
        (cpu / "cpu.cfs_period_us").write_text("100000")
        (cpu / "cpu.cfs_quota_us").write_text("100000")
        env = {**ENV, "KWNB_WARM": "1"}
        done = subprocess.run([sys.executable, "-c", WITH_A_FULL_POOL, str(memory / "cgroup.procs"),
                               str(cpu / "cgroup.procs")], capture_output=True, text=True, timeout=400, env=env, cwd=tmp_path)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, done.stdout[-2000:] + done.stderr[-3000:]
        result = __import__("json").loads(lines[-1][7:])
        assert result["ready"] == 2 and result["pool"] >= 300 << 20, result  # each kernel's own: found by their logs
        # What this process's pool says it holds, but never more than the group's usage: PSS also counts library
        # pages another group was charged for (loaded first outside it).
        assert result["pool"] == result["used"] or abs(result["pool"] - result["pss"]) < 50 << 20, result
        assert result["pool"] <= result["used"], result
        assert f"not counting {format_size(result['pool'])} of idle warm interpreters" in result["memory"], result
        assert result["left"] == 2 * GiB - result["used"] + result["pool"], result
        # The fit is judged on what is left with the pool's memory counted as left (counted in use, they made a run
        # look unfit). Whether a 2-worker run then fits 2 GiB depends on this venv's TensorFlow import, which grew by
        # about 107 MiB a process once jax is installed (TensorFlow 2.21 imports it): not this test's question.
        assert f"{format_size(result['left'])} is left" in result["fit"], result
    finally:
        for group in (memory, cpu):
            for pid in (group / "cgroup.procs").read_text().split():
                os.kill(int(pid), 9)
            time.sleep(0.5)
            group.rmdir()


def test_the_workshop_section_says_who_their_limits_isolation_and_how_many_runs_fit(monkeypatch):
    from kwnb.machine.neighbours import Neighbours

    limits = read_limits({"MEM_LIMIT": str(2 * GiB), "CPU_LIMIT": "1"})
    learners = Neighbours(other_uids=(1001, 1002))
    unable = netns.Support("a seccomp filter", "", True)  # no private network: runs share the host's
    monkeypatch.setattr(doctor, "_network_decision", lambda environ: (
        unable, learners, network_choice.choose(None, "", False, unable, learners)))
    monkeypatch.setattr(doctor.psutil, "virtual_memory", lambda: type("Memory", (), {"total": 16 * GiB})())
    monkeypatch.setattr(doctor.psutil, "cpu_count", lambda logical=True: 8)
    users, own, isolation, capacity = doctor.workshop_checks(limits, {"peak_rss": 600 << 20, "errors": {}}, {})
    assert users.ok and users.text.startswith(f"users: 3 accounts with processes or logins here (uid {os.geteuid()}, "
                                              "1001, 1002, yours first)"), users.text
    assert not own.ok and "memory 2.0 GiB ($MEM_LIMIT, set by JupyterHub), 1 CPU ($CPU_LIMIT" in own.text, own.text
    assert "no cgroup limits memory or CPUs here" in own.text and "mem_limit and cpu_limit" in own.fix
    assert not isolation.ok and isolation.text.startswith("learners not isolated"), isolation.text
    assert isolation.fix == doctor.reach_check({}).fix  # the reach line's decision and fix, not another's
    # A run: 2 x (600 MiB + 250 MiB) = 1.7 GiB; 16 GiB holds 9 of them, 8 CPUs 4 (one per worker).
    assert capacity.ok and capacity.text.startswith("capacity: this machine holds 4 2-worker runs at once: 9 by its "
                                                    "memory (16 GiB, 1.7 GiB per run), 4 by its 8 CPUs"), capacity.text
    alone = Neighbours()
    monkeypatch.setattr(doctor, "_network_decision", lambda environ: (
        netns.Support("", "slirp4netns", False), alone, network_choice.choose(None, "", False, unable, alone)))
    _, own, isolation, _ = doctor.workshop_checks(limits, {}, {})
    assert own.ok and own.text.endswith("no one else uses this machine")  # a laptop: no limit needed against oneself
    assert isolation.ok
    with_pool = doctor.limit_checks(limits, 569 * 10**6)[0]
    assert "not counting 543 MiB of idle warm interpreters: the pool gives it back" in with_pool.text
