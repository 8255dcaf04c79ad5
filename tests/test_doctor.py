"""`kwnb doctor` and `%kw_doctor` (kwnb/doctor.py): the truth about this machine, inside a limited
cgroup and under JupyterHub's variables, and a broken case that exits 1 with its fix."""
from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

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
