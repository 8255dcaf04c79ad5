"""A workshop on a real JupyterHub (issue 30): learners as Unix users, each server in cgroups of its own
(2 GB, 1 CPU), behind configurable-http-proxy on loopback (tests/hub_support.py, tests/hub_config.py).

Each learner's notebook (load kwnb, the doctor, a 2-worker Keras cell, %kw_wait) runs through the hub's
REST API and the kernel's websocket with the learner's own token, as JupyterLab runs it, all learners at
once. While every run holds after its training (until the test releases it), the test looks, as root, for
each learner's task ports in its tasks' /proc/PID/net/tcp, checks they answer from inside that run's network,
and tries them as every other learner. Then: every run ended ok, nothing of a learner's runs once its server
is stopped, and nothing of a learner's is in the shared temporary folders but its own kwnb-<uid>.
"""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

import hub_support
from hub_kernel import Execution, NotebookSession
from ui_support.dashboard_page import DASHBOARD, SHOTS, menu
from ui_support.lab import CHROMIUM, CHROMIUM_ARGS, write_settings
from ui_support.page_probes import SNAPSHOT_JS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LEARNERS = 3
RELEASE = "release-the-run"  # a file the test makes in each learner's home once it has tried the ports


def keras_cell(file: str, fit: str, after: str = "") -> str:
    """A learner's %%kw_worker cell: a small Keras model on 2 workers; `fit`: model.fit's arguments after the data."""
    return f"""%%kw_worker {file} -n 2
import os, time
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).random((512, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
first = tf.keras.callbacks.LambdaCallback(
    on_train_batch_end=lambda batch, logs: batch == 0 and print(f"first step {{time.time():.3f}}", flush=True))
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32), {fit})
{after}"""


TRAIN_CELL = keras_cell("hub_train.py", "epochs=2, steps_per_epoch=5, callbacks=[first], verbose=2", after=f"""\
deadline = time.time() + 120  # the test looks at this run's ports now; its servers stay up until released
while not os.path.exists({RELEASE!r}) and time.time() < deadline:
    time.sleep(0.2)
print("released" if os.path.exists({RELEASE!r}) else "not released", flush=True)
""")
CELLS = ["%load_ext kwnb", "%kw_doctor", TRAIN_CELL, "%kw_wait --timeout 200"]
TEMPORARY_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def run_notebook(hub, learner, released: threading.Event, out: dict) -> None:
    """One learner: their server, their token, the notebook's cells in order (the last after the release)."""
    try:
        url = hub.start_server(learner.name)
        session = NotebookSession(url, hub.user_token(learner.name), "workshop.ipynb", CELLS)
        out["executions"] = [session.execute(cell, timeout=240) for cell in CELLS[:3]]
        released.wait(240)
        out["executions"].append(session.execute(CELLS[3], timeout=240))
        session.close()
    except Exception as error:  # the checks say which learner and why
        out["error"] = f"{type(error).__name__}: {error}"


def task_processes(learner) -> list[psutil.Process]:
    """The learner's kwnb tasks: started by the bootstrap (cold), or forked by a forker, whose child each is (not by
    their TF_CONFIG: /proc/PID/environ shows only what a process was exec'd with, and a forked task sets its own)."""
    found = []
    for process in learner.processes():
        try:
            command = " ".join(process.cmdline())
            if "kwnb/task/bootstrap.py" in command or (
                    "kwnb/task/forker.py" in command and "kwnb/task/forker.py" in " ".join(process.parent().cmdline())):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):  # (AttributeError: no parent left)
            pass
    return found


def listening_ports(proc_net: str, uid: int) -> set[int]:
    """The TCP ports `uid` listens on, from a /proc/.../net/tcp or tcp6 file (state 0A: LISTEN)."""
    ports = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(proc_net, name).read_text().splitlines()[1:]
        except OSError:
            continue
        for fields in (line.split() for line in lines):
            if fields[3] == "0A" and int(fields[7]) == uid:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


CONNECT = 'exec 3<>"/dev/tcp/127.0.0.1/$0"'  # bash: exit 0 when the connection is made


def connects_as(learner, port: int) -> bool:
    done = subprocess.run(["/bin/bash", "-c", CONNECT, str(port)], user=learner.uid, group=learner.uid,
                          capture_output=True, timeout=30)
    return done.returncode == 0


def connects_inside(pid: int, port: int) -> bool:
    """As root, from inside the network the task `pid` is in: the control that the port really listens."""
    done = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "/bin/bash", "-c", CONNECT, str(port)],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def network_of(pid: int) -> str:
    """The network namespace a process is in, as /proc names it (`net:[inode]`); "" once it has gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def wait_for_ports(learner, timeout: float = 240) -> tuple[int | None, set[int], dict[int, str]]:
    """A task's pid, the ports the learner's tasks listen on, and each task's network, once both workers' servers are
    up in networks other than the host's. A forked task joins its run's network just after the fork (the forker stays
    outside, kwnb/task/forker.py), so for an instant it is in the host's: there it listens on nothing, but its
    /proc/PID/net/tcp is the host's, with the learner's kernel and server ports. A task still in the host's network
    when the time is up is returned as it is, for the checks to name."""
    host = network_of(os.getpid())
    deadline = time.monotonic() + timeout
    found: tuple[int | None, set[int], dict[int, str]] = (None, set(), {})
    while time.monotonic() < deadline:
        tasks = task_processes(learner)
        networks = {task.pid: net for task in tasks if (net := network_of(task.pid))}  # (not one that just ended)
        if len(tasks) >= 2:
            ports = set().union(*(listening_ports(f"/proc/{t.pid}/net", learner.uid) for t in tasks))
            found = (tasks[0].pid, ports, {pid: "host" if net == host else net for pid, net in networks.items()})
            if len(ports) >= 2 and host not in networks.values():
                return found
        time.sleep(0.5)
    return found


def tried_ports(learners) -> dict:
    """For each learner B: the network each of their tasks is in, their task ports, whether each answers inside B's
    network, on the host's /proc/net/tcp, and to which other learners."""
    host_listening = {learner.name: listening_ports("/proc/net", learner.uid) for learner in learners}
    tried = {}
    for owner in learners:
        pid, ports, networks = wait_for_ports(owner)
        tried[owner.name] = {
            "networks": networks,
            "ports": sorted(ports),
            "inside": {port: connects_inside(pid, port) for port in ports},
            "on_host": sorted(ports & (host_listening[owner.name] | listening_ports("/proc/net", owner.uid))),
            "reached_by": {other.name: [port for port in ports if connects_as(other, port)]
                           for other in learners if other is not owner},
        }
    return tried


def learner_files(learners, folders=TEMPORARY_FOLDERS) -> list[str]:
    """What the learners own in the shared temporary folders, but for each one's own kwnb-<uid>.

    Only folders someone else may write to (sticky, world-writable) or a learner owns can hold their files.
    """
    uids = {learner.uid for learner in learners}
    own = {os.path.join(folder, f"kwnb-{uid}") for folder in folders for uid in uids}
    found = []
    for top in folders:
        for folder, subfolders, files in os.walk(top):
            for entry in subfolders + files:
                path = os.path.join(folder, entry)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if info.st_uid in uids and path not in own:
                    found.append(path)
            subfolders[:] = [name for name in subfolders if _may_hold(os.path.join(folder, name), uids, own)]
    return found


def _may_hold(path: str, uids: set[int], own: set[str]) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return path not in own and not os.path.islink(path) and (info.st_mode & 0o002 or info.st_uid in uids)


def running(learners) -> dict[str, list[str]]:
    """Each learner's processes still alive: pid and command line."""
    left = {}
    for learner in learners:
        for process in learner.processes():
            try:
                left.setdefault(learner.name, []).append(f"{process.pid} {' '.join(process.cmdline())[:200]}")
            except psutil.NoSuchProcess:
                pass
    return left


@pytest.fixture(scope="module")
def hub():
    try:
        started = hub_support.start(LEARNERS)
    except hub_support.HubUnavailable as error:
        pytest.skip(str(error))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def workshop(hub):
    released, outs = threading.Event(), {learner.name: {} for learner in hub.learners}
    threads = [threading.Thread(target=run_notebook, args=(hub, learner, released, outs[learner.name]))
               for learner in hub.learners]
    for thread in threads:
        thread.start()
    try:
        ports = tried_ports(hub.learners)
    finally:
        for learner in hub.learners:
            (learner.home / RELEASE).touch()
        released.set()
        for thread in threads:
            thread.join(300)
    for learner in hub.learners:
        hub.stop_server(learner.name)
    deadline = time.monotonic() + 20  # the server's end stops kernels, runs and the warm pool
    while (left := running(hub.learners)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return {"outs": outs, "ports": ports, "left": left, "files": learner_files(hub.learners), "hub": hub,
            "first_step_s": {l.name: first_step_seconds(l, outs[l.name]) for l in hub.learners}}


def first_step_seconds(learner, out: dict) -> float | None:
    """From the training cell's execute request to the chief's `first step` line (reported, not asserted)."""
    logs = sorted(learner.home.glob(".kwnb/runs/hub_train-*/worker-0.log"))
    executions = out.get("executions", [])
    if not logs or len(executions) < 3:
        return None
    stamps = [float(line.split()[2]) for line in logs[0].read_text(errors="replace").splitlines()
              if line.startswith("first step ")]
    return round(stamps[0] - executions[2].sent_at, 1) if stamps else None


def test_every_learner_s_notebook_runs_ok(workshop):
    for name, out in workshop["outs"].items():
        assert "error" not in out, (name, out.get("error"), workshop["hub"].log_tail())
        executions: list[Execution] = out["executions"]
        assert [e.status for e in executions] == ["ok"] * 4, (name, [(e.status, e.text[-1500:]) for e in executions])
        doctor, started, waited = executions[1].text, executions[2].text, executions[3].text
        assert "2.0 GiB" in doctor and "1 CPU" in doctor, doctor  # MEM_LIMIT and CPU_LIMIT reached the kernel
        assert "Traceback" not in started + waited, started + waited
        assert "exit codes: 0, 0" in waited, waited


def test_no_learner_reaches_another_s_task_ports(workshop):
    for owner, tried in workshop["ports"].items():
        assert "host" not in tried["networks"].values(), (owner, tried)  # every task in a network of its run's
        assert len(set(tried["networks"].values())) == 1, (owner, tried)  # the same one
        assert len(tried["ports"]) >= 2, (owner, tried)  # both workers' servers were found
        assert all(tried["inside"].values()), (owner, tried)  # they listen, inside the run's network
        assert tried["on_host"] == [], (owner, tried)
        assert not any(tried["reached_by"].values()), (owner, tried)


def test_first_steps_are_reported(workshop):
    seconds = workshop["first_step_s"]
    print(f"first step after the execute request, by learner: {seconds}")
    assert all(value is not None and value > 0 for value in seconds.values()), seconds


def test_nothing_is_left_running_after_the_servers_stop(workshop):
    assert workshop["left"] == {}, workshop["left"]


def test_no_learner_file_in_the_shared_temporary_folders(workshop):
    assert workshop["files"] == [], workshop["files"]


# The browser test: JupyterLab under /user/NAME/ behind the proxy, a learner logged in through the hub's form.
# A fit of many short epochs, so that the log and the curves change while the page is watched; then Stop.
# Trains until the test clicks Stop, paced by a sleep after each step: the page's checks need the time, not the work.
BROWSER_FIT = keras_cell("browser_fit.py", "epochs=400, steps_per_epoch=20, verbose=1, callbacks=[tf.keras.callbacks."
                                           "LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.05))]")


def open_lab_as(page, hub, learner, path: str) -> None:
    """Log in at the hub's form (the dummy authenticator's shared password), then open the notebook in JupyterLab."""
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", learner.name)
    page.fill("#password_input", hub.password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{learner.name}/"), timeout=240_000)
    page.goto(f"{hub.url}/user/{learner.name}/lab/tree/{path}")
    page.locator(".jp-StatusBar-Widget").get_by_text(re.compile(r"Python 3.*\| Idle")).wait_for(timeout=180_000)


def watch_then_stop(page, seconds: float = 240) -> dict:
    """Sample the dashboard until the chief's log changed 3 times and its curves are drawn; click Stop; sample
    until the Stop button is disabled."""
    seen = {"logs": [], "curves": False, "stopped_at": None, "snapshots": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        snapshot = page.evaluate(SNAPSHOT_JS)
        if snapshot:
            seen["snapshots"].append(snapshot)
            if snapshot["logs"] and snapshot["logs"][0] not in seen["logs"][-1:]:
                seen["logs"].append(snapshot["logs"][0])
            seen["curves"] |= bool(snapshot["img"] and snapshot["img"]["rendered"])
            if seen["stopped_at"] is None and len(seen["logs"]) >= 3 and seen["curves"]:
                seen["enabled_while_running"] = not snapshot["stop_disabled"]
                page.locator(f"{DASHBOARD} button").first.click()
                seen["stopped_at"] = time.monotonic()
            if seen["stopped_at"] is not None and snapshot["stop_disabled"]:
                seen["final"] = snapshot
                break
        page.wait_for_timeout(300)
    return seen


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no {CHROMIUM}: the browser test needs Debian's chromium")
def test_the_dashboard_in_jupyterlab_through_the_hub(hub):
    from playwright.sync_api import sync_playwright

    learner = hub.learners[0]  # a fresh server (the workshop, when it ran first, stopped its own)
    settings = learner.home / ".jupyter" / "lab" / "user-settings"
    write_settings(settings)  # no news pop-up, outputs whole
    subprocess.run(["chown", "-R", f"{learner.uid}:{learner.uid}", str(learner.home / ".jupyter")], check=True)
    url = hub.start_server(learner.name)
    NotebookSession.save(url, hub.user_token(learner.name), "browser.ipynb", ["%load_ext kwnb", BROWSER_FIT])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        try:
            open_lab_as(page, hub, learner, "browser.ipynb")
            menu(page, "Run", "Run All Cells")
            page.locator(DASHBOARD).wait_for(timeout=120_000)
            seen = watch_then_stop(page)
        finally:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "hub-dashboard.png"))
            browser.close()
    assert len(seen["logs"]) >= 3, seen["logs"][-3:]  # the chief's log changed while the run went on
    assert seen["curves"], seen["snapshots"][-1:]  # the chief's curves drawn, their PNG loaded under /user/NAME/
    assert seen["stopped_at"] is not None and seen["enabled_while_running"], seen["snapshots"][-1:]
    final = seen.get("final")
    assert final is not None, seen["snapshots"][-1:]  # Stop ended the run and the button went disabled
    assert "stopped" in final["title"], final["title"]
