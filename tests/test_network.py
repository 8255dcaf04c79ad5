"""`--network private|host` (issue 16.2): a run's local tasks in a network namespace of their own.

The slow tests build a second network namespace of their own, joined to the root namespace by a veth
pair on a private /30, and try every worker port from there: refused while a `--network private` run
trains, accepted with `--network host` (the control that shows the test can see a worker). They only
ever connect to addresses of that namespace, of its veth pair, or to loopback.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import kwnb
import readable_copy
from kwnb.backends import LaunchError, local, make_launcher, netns, network_choice
from kwnb.engine.live.cluster import plan_tasks
from kwnb.errors import OptionError
from kwnb.machine.neighbours import Neighbours
from kwnb.options import add_launch_arguments, launch_options

REPO = Path(__file__).resolve().parents[1]
# Candidate /30s for the veth pair, the first that no interface here uses wins (10.213.47-62 are the Slurm tests').
SUBNETS = [ipaddress.ip_network(f"10.214.93.{4 * i}/30") for i in range(8)]


@pytest.fixture(autouse=True)
def fresh_support(monkeypatch):
    """Each test probes the machine afresh (support() is cached per process) and may say the host note."""
    netns.support.cache_clear()
    monkeypatch.setattr(network_choice, "_told_host", False)
    yield
    netns.support.cache_clear()


@pytest.fixture(autouse=True)
def single_user(monkeypatch):
    """This file's defaults are a single user's machine's: who else is here, and what that changes, is
    tests/test_hub_network.py's (the machine running the suite may be a JupyterHub, or shared)."""
    monkeypatch.setattr(local, "neighbours", lambda: Neighbours())


def private_possible() -> netns.Support:
    found = netns.support()
    if not found.possible:
        pytest.skip(f"no private network here: {found.forbidden_by}")
    return found


# ----- capability detection, defaults, notes, options ---------------------------------------------
def test_forbidden_by_names_each_switch_and_quotes_unshare():
    said = "unshare: write failed /proc/self/uid_map: Operation not permitted"
    apparmor = {"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1",
                "/proc/self/status": "Name:\tpython\nSeccomp:\t2\nSeccomp_filters:\t1\n"}
    text = netns.forbidden_by(said, True, read=apparmor.get)
    assert "AppArmor" in text and "Ubuntu 24.04" in text and "seccomp" in text and said in text
    debian = netns.forbidden_by(said, True, read={"/proc/sys/kernel/unprivileged_userns_clone": "0"}.get)
    assert "kernel.unprivileged_userns_clone = 0" in debian and "AppArmor" not in debian
    assert netns.forbidden_by(said, True, read={"/proc/sys/user/max_user_namespaces": "0"}.get).startswith(
        "user.max_user_namespaces = 0")
    # As root no user namespace is made, so the user-namespace switches are not to blame.
    assert netns.forbidden_by(said, False, read=apparmor.get).startswith("a seccomp filter")
    assert netns.forbidden_by("", False, read={}.get) == "unknown (unshare said: nothing)"


def test_support_runs_unshare_and_reports_what_it_said(tmp_path, monkeypatch):
    fake = tmp_path / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = netns.support()
    assert not found.possible and "unshare failed: Operation not permitted" in found.forbidden_by
    with pytest.raises(LaunchError, match="--network private cannot work here: .*Operation not permitted"):
        local.LocalLauncher(network="private").check()
    monkeypatch.setattr(local, "neighbours", lambda: Neighbours(other_uids=(4242,)))  # the note is for them
    launcher = local.LocalLauncher()  # the default falls back to the host network and says why, once
    assert launcher.addresses(plan_tasks(2))[0].startswith("localhost:") and launcher.chosen == "host"
    notes = launcher.finish()
    assert len(notes) == 1 and "cannot isolate them here" in notes[0] and "Operation not permitted" in notes[0]


def test_support_on_this_machine_matches_a_real_unshare():
    user = os.geteuid() != 0
    probe = subprocess.run(["unshare", *(["--user", "--map-root-user"] if user else []), "--net", "true"],
                           capture_output=True, text=True) if shutil.which("unshare") else None
    found = netns.support()
    assert found.possible == (probe is not None and probe.returncode == 0), (found, probe)
    assert found.tool == next((name for name in netns.TOOLS if shutil.which(name)), "")


def test_names_on_a_host_loopback_resolver_are_named(tmp_path):
    stub = tmp_path / "resolv.conf"
    stub.write_text("# systemd-resolved\nnameserver 127.0.0.53\noptions edns0\n")
    assert "127.0.0.53" in netns._dns_problem(str(stub))
    stub.write_text("nameserver 127.0.0.53\nnameserver 192.0.2.53\n")
    assert netns._dns_problem(str(stub)) == ""


NOTE_ONCE = """
import json, os
os.environ["KWNB_USERNET"] = "none"  # no user-mode networking: the default is then the host network
from kwnb.backends import local, make_launcher
from kwnb.engine.live.cluster import plan_tasks
from kwnb.machine.neighbours import Neighbours
import sys
# a single user's machine (told nothing), else another account here, whoever else uses the one running the suite
alone = sys.argv[1:] == ["alone"]  # else a ps run (host network) with another account here
local.neighbours = Neighbours if alone else (lambda: Neighbours(other_uids=(4242,)))
seen = []
for _ in range(3):
    launcher = make_launcher("local")
    launcher.addresses(plan_tasks(2) if alone else plan_tasks(1, ps=1))
    seen.append([launcher.chosen, launcher.finish()])
print(json.dumps(seen))
"""


def test_host_note_is_said_once_per_process_and_only_where_someone_else_could_connect():
    result = subprocess.run([sys.executable, "-c", NOTE_ONCE], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert [chosen for chosen, _ in seen] == ["host"] * 3
    first, *later = [notes for _, notes in seen]
    assert later == [[], []] and len(first) == 1
    assert "other users of this machine can connect" in first[0] and "uid 4242" in first[0]
    assert "a ps run cannot be private, since this notebook coordinates its tasks" in first[0]
    alone = subprocess.run([sys.executable, "-c", NOTE_ONCE, "alone"], capture_output=True, text=True, timeout=60,
                           cwd=REPO)
    assert alone.returncode == 0, alone.stderr
    assert [notes for _, notes in json.loads(alone.stdout.splitlines()[-1])] == [[], [], []]  # a laptop: no noise


def test_default_is_private_where_everything_is_there():
    found = private_possible()
    launcher = make_launcher("local")
    launcher.addresses(plan_tasks(2))
    try:
        assert launcher.chosen == ("private" if found.complete else "host")
        assert (launcher.private is not None and launcher.private.alive) == found.complete
    finally:
        launcher.finish()
    assert launcher.private is None  # finish() ended the namespace: no task lives in it


def test_ps_runs_refuse_a_private_network_and_default_to_the_host(tmp_path, monkeypatch):
    private_possible()
    script = tmp_path / "server.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(LaunchError, match="the notebook coordinates ps tasks and must reach them: use --network host"):
        kwnb.launch(script, n=1, ps=1, network="private", runs_dir=tmp_path / "runs")
    monkeypatch.setattr(local, "neighbours", lambda: Neighbours(other_uids=(4242,)))  # someone to warn
    launcher = make_launcher("local")
    assert launcher.addresses(plan_tasks(1, ps=1)) and launcher.chosen == "host"
    assert "a ps run cannot be private" in launcher.finish()[0]


def test_a_ps_run_with_a_chief_task_is_coordinated_by_that_task_not_the_notebook(monkeypatch):
    """Under --chief the chief task coordinates ParameterServerStrategy inside the run's network: the run
    needs no host network, and no note says the notebook coordinates it."""
    found = private_possible()
    monkeypatch.setattr(local, "neighbours", lambda: Neighbours(other_uids=(4242,)))
    assert not network_choice.coordinated_here(["chief", "worker", "ps"])
    assert network_choice.coordinated_here(["worker", "ps", "chief"])
    launcher = make_launcher("local")
    try:
        assert launcher.addresses(plan_tasks(1, ps=1, chief=True))
        assert launcher.chosen == ("private" if found.complete else "host")
        assert not any("coordinates" in note for note in launcher._notes)
    finally:
        launcher.finish()


def test_network_option_reaches_the_local_launcher_only():
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    add_launch_arguments(parser)
    assert launch_options(parser.parse_args(["main.py", "--network", "private"]))["launcher"].network == "private"
    assert launch_options(parser.parse_args(["main.py"]))["launcher"].network is None
    with pytest.raises(OptionError, match="--network only apply with --backend local"):
        launch_options(parser.parse_args(["main.py", "--backend", "slurm", "--network", "host"]))
    with pytest.raises(OptionError, match="--network must be one of private, host"):
        local.LocalLauncher(network="bridge")


# ----- the test's own namespace, joined by a veth pair ---------------------------------------------
class Outside:
    """A network namespace of the test's own, `kwnet<pid>ns`, with a veth pair into the root namespace."""

    def __init__(self):
        token = f"kwnet{os.getpid()}"
        self.ns, self.root_end, self.ns_end = f"{token}ns", f"{token}o", f"{token}i"
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        taken = [ipaddress.ip_interface(word).network for word in used.split() if "/" in word and word[0].isdigit()]
        self.subnet = next(net for net in SUBNETS if not any(net.overlaps(other) for other in taken))
        self.root_address, self.address = str(self.subnet[1]), str(self.subnet[2])

    def up(self) -> "Outside":
        ip = lambda *args: subprocess.run(["ip", *args], check=True, capture_output=True)  # noqa: E731
        ip("netns", "add", self.ns)
        ip("link", "add", self.root_end, "type", "veth", "peer", "name", self.ns_end)
        ip("link", "set", self.ns_end, "netns", self.ns)
        ip("addr", "add", f"{self.root_address}/30", "dev", self.root_end)
        ip("link", "set", self.root_end, "up")
        ip("-n", self.ns, "addr", "add", f"{self.address}/30", "dev", self.ns_end)
        ip("-n", self.ns, "link", "set", self.ns_end, "up")
        ip("-n", self.ns, "link", "set", "lo", "up")
        return self

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self.root_end], capture_output=True)  # takes its peer along
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def popen(self, code: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(["nsenter", f"--net=/run/netns/{self.ns}", sys.executable, "-c", code, *args],
                                stdout=subprocess.PIPE, text=True)

    def connect(self, ports: list[int]) -> dict[str, str]:
        """From inside this namespace, to the root namespace's end of the veth: what each port does."""
        with self.popen(CONNECT, self.root_address, json.dumps(ports)) as client:
            return json.loads(client.communicate(timeout=60)[0])


CONNECT = """
import json, socket, sys
found = {}
for port in json.loads(sys.argv[2]):
    try:
        socket.create_connection((sys.argv[1], port), timeout=2).close()
        found[port] = "connected"
    except OSError as error:
        found[port] = type(error).__name__
print(json.dumps(found))
"""

# Says hello to whoever connects (the workers' outbound check); bounded: ends after 120 s.
HELLO = """
import socket, sys, time
server = socket.create_server((sys.argv[1], 0))
server.settimeout(1)
print(server.getsockname()[1], flush=True)
deadline = time.time() + 120
while time.time() < deadline:
    try:
        connection, _ = server.accept()
    except socket.timeout:
        continue
    connection.sendall(b"hello")
    connection.close()
"""


@pytest.fixture
def outside():
    if os.geteuid() != 0:
        pytest.skip("not root: the test's own namespace and veth pair need root")
    if not shutil.which("ip") or not shutil.which("nsenter"):
        pytest.skip("iproute2's ip and util-linux's nsenter are needed for the test's own namespace")
    made = Outside()
    try:
        made.up()
    except subprocess.CalledProcessError as error:
        made.down()
        pytest.skip(f"cannot make a network namespace here: {error.stderr.decode().strip()}")
    hello = made.popen(HELLO, made.address)
    made.hello = f"{made.address}:{hello.stdout.readline().strip()}"
    yield made
    hello.kill()
    hello.wait()
    made.down()


# A tiny tf-keras MultiWorkerMirroredStrategy job that says where it listens, tries one connection out,
# and holds after its first epoch until the test has tried its ports.
TRAIN = textwrap.dedent("""
    import json, os, socket, time
    import numpy as np
    import tensorflow as tf
    print("TF_CONFIG", os.environ["TF_CONFIG"], flush=True)
    host, port = os.environ["HELLO"].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            print("OUTBOUND", connection.recv(5).decode(), flush=True)
    except OSError as error:
        print("OUTBOUND failed:", error, flush=True)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,)),
                                     tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")

    class Hold(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            print("EPOCH", epoch, flush=True)
            deadline = time.time() + 120
            while epoch == 0 and not os.path.exists("go") and time.time() < deadline:
                time.sleep(0.1)

    x = np.random.rand(64, 4).astype("float32")
    model.fit(x, x.sum(axis=1), epochs=2, batch_size=16, verbose=0, callbacks=[Hold()])
""")


def worker_ports(run: kwnb.Run, marker: str, seconds: float = 240) -> list[int]:
    """The port in each task's own TF_CONFIG, once every task has printed `marker` (or the run ended)."""
    deadline = time.time() + seconds
    while time.time() < deadline and not run.done:
        if all(marker in task.log_path.read_text() for task in run.workers):
            break
        time.sleep(0.2)
    assert all(marker in task.log_path.read_text() for task in run.workers), run.summary()
    configs = [json.loads(next(line.split(" ", 1)[1] for line in task.log_path.read_text().splitlines()
                               if line.startswith("TF_CONFIG "))) for task in run.workers]
    assert [config["cluster"] for config in configs] == [task.tf_config["cluster"] for task in run.workers]
    return [int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1]) for config in configs]


def train_and_try(tmp_path: Path, outside: Outside, network: str) -> tuple[kwnb.Run, dict, dict]:
    (tmp_path / "train.py").write_text(TRAIN)
    run = kwnb.launch(tmp_path / "train.py", n=2, network=network, cwd=tmp_path, runs_dir=tmp_path / "runs",
                      env={"HELLO": outside.hello}, timeout=300)
    try:
        ports = worker_ports(run, "EPOCH 0")
        assert run.status == "running" and run.wait_ready(timeout=30), run.summary()
        from_outside = outside.connect(ports)
        from_loopback = json.loads(subprocess.run([sys.executable, "-c", CONNECT, "127.0.0.1", json.dumps(ports)],
                                                  capture_output=True, text=True, timeout=60).stdout)
    finally:
        (tmp_path / "go").touch()
    assert run.wait(120) == [0, 0], run.summary()
    return run, from_outside, from_loopback


@pytest.mark.slow
def test_no_other_host_reaches_a_private_run_while_it_trains(tmp_path, outside):
    found = private_possible()
    run, from_outside, from_loopback = train_and_try(tmp_path, outside, "private")
    assert run.launcher.chosen == "private"
    assert set(from_outside.values()) == {"ConnectionRefusedError"}, from_outside
    assert set(from_loopback.values()) == {"ConnectionRefusedError"}, from_loopback  # not even this machine
    outbound = "OUTBOUND hello" if found.tool else "OUTBOUND failed"
    assert all(outbound in task.log_path.read_text() for task in run.workers), run.logs(0)
    assert run.launcher.private is None  # the namespace's holder and slirp4netns ended with the run


@pytest.mark.slow
def test_control_host_network_run_is_reachable_from_the_other_namespace(tmp_path, outside):
    run, from_outside, from_loopback = train_and_try(tmp_path, outside, "host")
    assert run.launcher.chosen == "host"
    assert set(from_outside.values()) == {"connected"}, from_outside
    assert set(from_loopback.values()) == {"connected"}, from_loopback


# Standard library only: listens where its TF_CONFIG says, tries one connection out, waits for "go".
LISTEN = textwrap.dedent("""
    import json, os, socket, time
    config = json.loads(os.environ["TF_CONFIG"])
    print("TF_CONFIG", os.environ["TF_CONFIG"], flush=True)
    server = socket.create_server(("0.0.0.0", int(config["cluster"]["worker"][config["task"]["index"]].split(":")[1])))
    host, port = os.environ["HELLO"].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=5) as connection:
            print("OUTBOUND", connection.recv(5).decode(), flush=True)
    except OSError as error:
        print("OUTBOUND failed:", error, flush=True)
    deadline = time.time() + 60
    while not os.path.exists("go") and time.time() < deadline:
        time.sleep(0.1)
""")


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["slirp4netns", "pasta", "none"])
def test_each_user_mode_network_lets_out_and_nothing_in(tmp_path, outside, monkeypatch, tool):
    if tool != "none" and not shutil.which(tool):
        pytest.skip(f"{tool} is not installed (Debian: apt-get install {'passt' if tool == 'pasta' else tool})")
    monkeypatch.setenv(netns.USERNET_ENV, tool)
    found = private_possible()
    (tmp_path / "listen.py").write_text(LISTEN)
    run = kwnb.launch(tmp_path / "listen.py", n=2, network="private", cwd=tmp_path, runs_dir=tmp_path / "runs",
                      env={"HELLO": outside.hello}, timeout=120)
    try:
        ports = worker_ports(run, "OUTBOUND", seconds=60)
        assert run.wait_ready(timeout=30), run.summary()
        from_outside = outside.connect(ports)
    finally:
        (tmp_path / "go").touch()
    assert run.wait(60) == [0, 0], run.summary()
    assert set(from_outside.values()) == {"ConnectionRefusedError"}, from_outside
    outbound = "OUTBOUND failed" if tool == "none" else "OUTBOUND hello"
    assert all(outbound in task.log_path.read_text() for task in run.workers), run.logs(0)
    assert found.user_namespace == (os.geteuid() != 0 or tool == "pasta")
    assert any("no outside access" in note for note in run.notes) == (tool == "none"), run.notes


# Run as an unprivileged user with the system's Python: the namespace is made without root.
UNPRIVILEGED = textwrap.dedent("""
    import json, os, socket, subprocess, sys, time, types
    for name in ("kwnb", "kwnb.backends"):  # not their __init__: it imports the venv's packages
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(sys.argv[1], *name.split("."))]
        sys.modules[name] = package
    from kwnb.backends import netns
    found = netns.support()
    if not found.possible:
        print(json.dumps({"forbidden_by": found.forbidden_by}))
        sys.exit()
    network = netns.PrivateNetwork(found).start()
    port = network.free_ports(1)[0]
    server = subprocess.Popen(network.enter([sys.executable, "-c",
        "import socket, time; s = socket.create_server(('0.0.0.0', %d)); time.sleep(30)" % port]))
    deadline = time.time() + 10
    while not network.probe(f"localhost:{port}") and time.time() < deadline:
        time.sleep(0.02)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        outside = "connected"
    except OSError as error:
        outside = type(error).__name__
    seen = {"uid": os.getuid(), "user_namespace": found.user_namespace, "probe": network.probe(f"localhost:{port}"),
            "outside": outside, "setup_seconds": network.setup_seconds}
    server.kill()
    server.wait()
    network.close()
    seen["ended"] = [network.holder.returncode is not None, network.tool is None or network.tool.returncode is not None]
    print(json.dumps(seen))
""")


@pytest.mark.slow
def test_an_unprivileged_user_gets_a_private_network():
    """User 65534 runs the system's Python on a readable copy of kwnb: the checkout and its venv may be in
    a directory only root can enter (a clone under /root or `mktemp -d`), and netns.py needs neither."""
    system_python = "/usr/bin/python3"
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(system_python, os.X_OK):
        pytest.skip("needs root (to become an unprivileged user with setpriv) and the system's /usr/bin/python3")
    with readable_copy.copy_for_everyone(REPO / "kwnb") as copy:
        if copy is None:
            pytest.skip(f"no temporary directory that user 65534 can enter for a copy of kwnb (tried "
                        f"{', '.join(dict.fromkeys((tempfile.gettempdir(), *readable_copy.CANDIDATES)))})")
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python,
                                 "-c", UNPRIVILEGED, str(copy)], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    if "forbidden_by" in seen:
        pytest.skip(f"unprivileged user namespaces are not allowed here: {seen['forbidden_by']}")
    assert seen["uid"] == 65534 and seen["user_namespace"] is True
    assert seen["probe"] is True and seen["outside"] == "ConnectionRefusedError"
    assert seen["ended"] == [True, True]


def test_kwnb_network_sets_the_default(monkeypatch):
    from kwnb.backends import make_launcher
    from kwnb.errors import OptionError

    monkeypatch.setenv("KWNB_NETWORK", "host")
    assert make_launcher("local").network == "host"
    assert make_launcher("local", network="private").network == "private"  # an option still wins
    monkeypatch.setenv("KWNB_NETWORK", "elsewhere")
    with pytest.raises(OptionError, match="KWNB_NETWORK"):
        make_launcher("local")
