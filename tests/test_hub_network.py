"""A shared machine (issue 30): the network a run gets by default (backends/network_choice.py) from
who else is here (machine/neighbours.py); slirp4netns and pasta checked for real (their TUN device,
their start); the doctor saying what the launcher will do. The slow tests run as a fresh Unix user
(useradd), with the TUN device made unusable to it (mode 600, as on the hub of the issue) in a mount
namespace of their own: the rest of the machine keeps its device as it is.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

import kwnb
import readable_copy
from kwnb import doctor
from kwnb.backends import local, netns, network_choice
from kwnb.engine.live.cluster import plan_tasks
from kwnb.machine import neighbours as neighbours_module
from kwnb.machine.neighbours import Neighbours
from test_network import fresh_support, private_possible  # noqa: F401  (fresh_support: an autouse fixture)

REPO = Path(__file__).resolve().parents[1]
HUB = {"JUPYTERHUB_USER": "learner", "JUPYTERHUB_API_URL": "http://127.0.0.1:8081/hub/api"}
NOBODY_ELSE = Neighbours()
ON_A_HUB = Neighbours(hub="JUPYTERHUB_USER")
COMPLETE = netns.Support("", "slirp4netns", False)
NO_TOOL = netns.Support("", "", True)
TUN_DENIED = netns.Support("", "", True, unusable="slirp4netns is installed, but this user cannot open /dev/net/tun "
                                                  "(Permission denied)")
FORBIDDEN = netns.Support("AppArmor restricts unprivileged user namespaces", "", True)


@pytest.fixture(autouse=True)
def no_hub_variables(monkeypatch, fresh_support):
    """No JupyterHub variable or network default leaks in from the machine that runs the suite."""
    for name in (*HUB, local.NETWORK_ENV):
        monkeypatch.delenv(name, raising=False)


# ----- the decision ------------------------------------------------------------------------------------
@pytest.mark.parametrize("found, others, expected", [
    (COMPLETE, NOBODY_ELSE, "private"),  # as before: private wherever it also reaches the outside
    (COMPLETE, ON_A_HUB, "private"),
    (NO_TOOL, ON_A_HUB, "private"),  # new: isolated without outside access, since others could connect
    (TUN_DENIED, ON_A_HUB, "private"),
    (NO_TOOL, Neighbours(other_uids=(1001,)), "private"),
    (NO_TOOL, Neighbours(cluster="KUBERNETES_SERVICE_HOST"), "private"),
    (NO_TOOL, Neighbours(public_address="203.0.113.7"), "private"),
    (NO_TOOL, NOBODY_ELSE, "host"),  # a single user's laptop keeps its tasks' downloads
    (TUN_DENIED, NOBODY_ELSE, "host"),
    (FORBIDDEN, ON_A_HUB, "host"),  # nothing else can be made
])
def test_the_default_per_situation(found, others, expected):
    choice = network_choice.choose(None, "", False, found, others)
    assert choice.network == expected and not choice.given, choice
    assert network_choice.choose("host", "$KWNB_NETWORK", False, found, others).network == "host"  # as given
    assert network_choice.choose(None, "", True, found, others).network == "host"  # a ps run


def test_neighbours_are_read_from_the_hub_variables_processes_and_addresses(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root to give the stand-in /proc entries other owners")
    for pid, uid in {"100": 1500, "101": 65534, "102": 0, "103": 2000, "self": 1600}.items():
        (tmp_path / pid).mkdir()
        os.chown(tmp_path / pid, uid, uid)
    monkeypatch.setattr(psutil, "users", lambda: [])
    assert neighbours_module.other_people(me=2000, proc=str(tmp_path)) == (1500,)  # not nobody, root, me, or "self"
    fake = lambda address: [SimpleNamespace(family=socket.AF_INET, address=address)]  # noqa: E731
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {"lo": fake("127.0.0.1"), "eth0": fake("10.1.2.3")})
    assert neighbours_module.public_address() == ""  # a private LAN is not seen
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {"eth0": fake("203.0.113.7"), "eth1": fake("8.8.4.4")})
    assert neighbours_module.public_address() == "8.8.4.4"  # 203.0.113.0/24 is documentation, not global
    seen = neighbours_module.neighbours(HUB)
    assert seen.hub == "JUPYTERHUB_API_URL" and seen.present and "JupyterHub" in seen.who()


def test_on_a_hub_without_a_usernet_tool_runs_are_private_and_say_what_they_cannot_reach(monkeypatch):
    private_possible()
    monkeypatch.setenv(netns.USERNET_ENV, "none")
    monkeypatch.setenv("JUPYTERHUB_USER", "learner")
    netns.support.cache_clear()  # probed by private_possible() with the machine's tools
    launcher = local.LocalLauncher()
    launcher.addresses(plan_tasks(2))
    try:
        assert launcher.chosen == "private" and launcher.private.alive
    finally:
        notes = launcher.finish()
    assert len(notes) == 1 and "no outside access" in notes[0] and "offline sample" in notes[0], notes


def test_no_private_network_on_a_shared_machine_says_who_can_connect_and_what_the_organiser_can_do(
        tmp_path, monkeypatch):
    fake = tmp_path / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("JUPYTERHUB_USER", "learner")
    launcher = local.LocalLauncher()
    launcher.addresses(plan_tasks(2))
    assert launcher.chosen == "host"
    notes = launcher.finish()
    assert len(notes) == 1 and "other users of this machine can connect to the tasks' ports" in notes[0], notes
    assert "the organiser can allow unprivileged user namespaces" in notes[0]
    reach = doctor.reach_check({**os.environ})
    assert not reach.ok and "JupyterHub" in reach.text and "user namespaces" in reach.fix


# ----- the TUN device and the tool's start ------------------------------------------------------------
def test_a_tool_whose_tun_device_cannot_be_opened_is_not_chosen(tmp_path, monkeypatch):
    if not any(shutil.which(tool) for tool in netns.TOOLS):
        pytest.skip("neither slirp4netns nor pasta is installed")
    monkeypatch.setattr(netns, "TUN_DEVICE", str(tmp_path / "absent-tun"))  # as in a container without it
    found = netns.support()
    assert found.tool == "" and not found.complete
    assert "is installed, but this user cannot open" in found.unusable and "absent-tun" in found.unusable
    check = doctor.network_check({**os.environ, **HUB})
    if found.possible:
        assert check.text.startswith("private by default") and "has no outside access" in check.text, check
    assert not check.ok and "/dev/net/tun" in check.fix, check


BROKEN_TOOL = "#!/bin/sh\nprintf 'open(\"/dev/net/tun\"): Permission denied\\nchild failed(1)\\n' >&2\nexit 1\n"


def test_a_tool_that_fails_at_start_leaves_the_run_private_without_outside_access(tmp_path, monkeypatch):
    """The issue's slirp4netns, as it failed: the run goes on in its namespace, said once, no bytes repr."""
    private_possible()
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "slirp4netns"
    tool.write_text(BROKEN_TOOL)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(netns.USERNET_ENV, "slirp4netns")
    assert netns.support().complete  # the probe cannot know: the device itself opens
    (tmp_path / "hello.py").write_text("print('hello from inside')\n")
    run = kwnb.launch(tmp_path / "hello.py", n=2, cwd=tmp_path, runs_dir=tmp_path / "runs", timeout=60)
    assert run.wait(60) == [0, 0], run.summary()
    assert run.launcher.chosen == "private"
    said = [note for note in run.notes if "slirp4netns" in note]
    assert said == ['slirp4netns could not connect the private network: open("/dev/net/tun"): Permission denied; '
                    "child failed(1); the run went on in a private network without outside access: downloads "
                    "inside fail (kwnb.datasets.mnist still loads its offline sample; fetch other data in the "
                    "notebook before the run)"], run.notes
    assert not any("b'" in note for note in run.notes)


# ----- the doctor says what the launcher will do --------------------------------------------------------
@pytest.mark.parametrize("environ", [{}, {"KWNB_NETWORK": "private"}, {"KWNB_NETWORK": "host"}, HUB,
                                     {netns.USERNET_ENV: "none"}, {netns.USERNET_ENV: "none", **HUB},
                                     {netns.USERNET_ENV: "none", "KWNB_NETWORK": "private"}])
def test_the_doctor_names_the_network_the_launcher_chooses(environ, monkeypatch):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    netns.support.cache_clear()
    check = doctor.network_check({**os.environ})
    launcher = local.LocalLauncher()
    try:
        launcher.addresses(plan_tasks(2))
    except kwnb.errors.LaunchError:  # --network private where none can be made: the doctor blocks it
        assert check.blocking
        return
    finally:
        launcher.finish()
    said = f"(${local.NETWORK_ENV}={environ[local.NETWORK_ENV]}):" if local.NETWORK_ENV in environ else "by default:"
    assert check.text.startswith(f"{launcher.chosen} {said}"), (check, launcher.chosen)


# ----- as a fresh unprivileged user, with the TUN device mode 600 ------------------------------------------
TASK = textwrap.dedent("""
    import json, os, stat, sys, tempfile
    folder = os.environ.get("TMPDIR", "")
    found = os.stat(folder) if folder else None
    seen = {"uid": os.getuid(), "tmpdir": folder, "temp": [os.environ.get("TEMP"), os.environ.get("TMP")],
            "gettempdir": tempfile.gettempdir(), "mode": found and oct(stat.S_IMODE(found.st_mode)),
            "owner": found and found.st_uid}
    if len(sys.argv) > 1:  # a small TensorFlow task, whose AutoGraph writes a module and its __pycache__
        import tensorflow as tf
        exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"))
    print("SEEN " + json.dumps(seen), flush=True)
""")
AUTOGRAPH = textwrap.dedent("""
    @tf.function
    def double_positive(x):
        if x > 0:
            x = x * 2
        return x
    seen["tf"] = int(double_positive(tf.constant(3)))
""")
AS_LEARNER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import kwnb
    work = sys.argv[2]
    run = kwnb.launch(os.path.join(work, "task.py"), n=2, cwd=work, runs_dir=os.path.join(work, "runs"),
                      args=sys.argv[3:], timeout=240)
    codes = run.wait(240)
    print(json.dumps({"codes": codes, "chosen": run.launcher.chosen, "notes": run.notes,
                      "logs": [run.logs(i) for i in range(2)]}))
""")


@pytest.fixture
def learner(tmp_path):
    """A fresh Unix user (useradd), as a JupyterHub's learner is, with a folder of its own to work in."""
    if os.geteuid() != 0 or not all(shutil.which(name) for name in ("useradd", "userdel", "setpriv", "unshare")):
        pytest.skip("needs root, useradd, setpriv and unshare to run as a fresh learner")
    name = f"kwnbl{os.getpid() % 100000}"
    # A run killed before its teardown leaves its learner; a later process with the same pid would not get one.
    subprocess.run(["userdel", name], capture_output=True)
    made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    user = pwd.getpwnam(name)
    try:
        with readable_copy.copy_for_everyone(REPO / "kwnb") as copy:
            if copy is None:
                pytest.skip("no temporary directory that a fresh user can enter for a copy of kwnb")
            work = copy / "work"
            work.mkdir()
            os.chown(work, user.pw_uid, user.pw_gid)
            yield user, copy, work
    finally:
        shutil.rmtree(f"/tmp/kwnb-{user.pw_uid}", ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True)


def learner_python() -> str:
    """The system's Python, reading this venv's packages: a venv's interpreter may live where a user
    namespace cannot follow it (here under /root, mode 700), and a private run's tasks start in one."""
    system = "/usr/bin/python3"
    same = os.access(system, os.X_OK) and subprocess.run(
        [system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
    ).stdout.strip() == str(sys.version_info[:2])
    if not same:
        pytest.skip(f"no system Python {sys.version_info[0]}.{sys.version_info[1]} to run as the learner")
    return system


def run_as_learner(learner, tun_mode_600: bool, *args: str) -> dict:
    user, copy, work = learner
    (work / "task.py").write_text(TASK)
    packages = os.pathsep.join([str(copy), *site.getsitepackages()])
    env = {"PATH": os.environ["PATH"], "HOME": str(work), "PYTHONPATH": packages, "KWNB_WARM": "0",
           "TF_CPP_MIN_LOG_LEVEL": "2", **HUB}  # no PYTHONDONTWRITEBYTECODE: AutoGraph's __pycache__ is written
    become = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
              learner_python(), "-c", AS_LEARNER, str(copy), str(work), *args]
    # In a mount namespace of this test's own: a way through the folders the learner cannot enter to this
    # venv's packages (a clone in a mode-700 folder), and with tun_mode_600 the real device node, mode 600,
    # over /dev/net/tun; the rest of the machine keeps its folders and device as they are.
    steps = [readable_copy.reach_steps([Path(path) for path in site.getsitepackages()], copy / "reach")]
    if tun_mode_600:
        node = copy / "tun"
        os.mknod(node, 0o600 | 0o020000, os.makedev(10, 200))
        steps.append(f"mount --bind {node} /dev/net/tun")
    if any(steps):
        become = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  " && ".join(step for step in steps if step) + ' && exec "$@"', "sh", *become]
    done = subprocess.run(become, capture_output=True, text=True, timeout=400, env=env, cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def task_seen(result: dict) -> list[dict]:
    return [json.loads(next(line for line in log.splitlines() if line.startswith("SEEN "))[5:])
            for log in result["logs"]]


@pytest.mark.slow
def test_a_learner_with_slirp4netns_but_no_tun_device_gets_a_private_run_that_ends_ok(learner):
    """The issue's hub: slirp4netns on the PATH, /dev/net/tun mode 600. Before, every run failed at start."""
    if not shutil.which("slirp4netns"):
        pytest.skip("slirp4netns is not installed")
    private_possible()
    result = run_as_learner(learner, True)
    assert result["codes"] == [0, 0], result
    assert result["chosen"] == "private"
    assert result["notes"] == ["the private network has no outside access (slirp4netns is installed, but this user "
                               "cannot open /dev/net/tun (Permission denied)): downloads inside fail (kwnb.datasets."
                               "mnist still loads its offline sample; fetch other data in the notebook before the "
                               "run)"], result["notes"]
    user = learner[0]
    for seen in task_seen(result):  # inside its user namespace the learner is uid 0, and owns its folder
        assert seen["tmpdir"] == f"/tmp/kwnb-{user.pw_uid}", seen
        assert seen["temp"] == [seen["tmpdir"]] * 2 and seen["gettempdir"] == seen["tmpdir"]
        assert seen["mode"] == "0o700" and seen["owner"] == seen["uid"], seen
    outside = os.stat(f"/tmp/kwnb-{user.pw_uid}")
    assert outside.st_uid == user.pw_uid and stat.S_IMODE(outside.st_mode) == 0o700


@pytest.mark.slow
def test_a_learners_tensorflow_task_leaves_nothing_in_the_shared_tmp(learner):
    user, _, work = learner
    (work / "autograph.py").write_text(AUTOGRAPH)

    def owned() -> set[str]:
        return {entry.name for entry in os.scandir("/tmp") if entry.stat(follow_symlinks=False).st_uid == user.pw_uid}

    before = owned()
    result = run_as_learner(learner, False, str(work / "autograph.py"))
    assert result["codes"] == [0, 0], result
    assert [seen["tf"] for seen in task_seen(result)] == [6, 6]
    assert before == set() and owned() == {f"kwnb-{user.pw_uid}"}  # its own folder, mode 700, and nothing else
    private = Path(f"/tmp/kwnb-{user.pw_uid}")
    assert (private / "__pycache__").is_dir()  # AutoGraph wrote here, not into /tmp/__pycache__
