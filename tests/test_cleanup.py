"""No orphans: a kernel restarted, shut down or SIGKILLed leaves no worker (nor a worker's child) alive."""
import signal
import time

import psutil
import pytest
from jupyter_client.manager import start_new_kernel

LAUNCH = """
%load_ext kwnb
import kwnb, pathlib, time
pathlib.Path('sleeper.py').write_text(
    "import subprocess, time\\n"
    "child = subprocess.Popen(['sleep', '300'])\\n"
    "print('child', child.pid, flush=True)\\n"
    "time.sleep(300)\\n")
run = kwnb.launch('sleeper.py', n=2)
deadline = time.time() + 30
while time.time() < deadline and not all('child' in w.log_path.read_text() for w in run.workers):
    time.sleep(0.1)
pids = [w.pid for w in run.workers] + [int(w.log_path.read_text().split()[1]) for w in run.workers]
print('PIDS', *pids)
"""


def run_code(client, code: str) -> str:
    out = []
    reply = client.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", "")))
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def launched_pids(client, code: str = LAUNCH, count: int = 4) -> list[int]:
    line = [l for l in run_code(client, code).splitlines() if l.startswith("PIDS")][-1]
    pids = [int(p) for p in line.split()[1:]]
    assert len(pids) == count and all(psutil.pid_exists(p) for p in pids)
    return pids


def gone_within(pids: list[int], seconds: float) -> list[int]:
    deadline = time.time() + seconds
    while time.time() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


@pytest.fixture
def kernel(tmp_path):
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    yield manager, client
    client.stop_channels()
    if manager.is_alive():
        manager.shutdown_kernel(now=True)


def test_kernel_restart_and_shutdown_stop_every_worker_and_child(kernel):
    manager, client = kernel
    pids = launched_pids(client)
    manager.restart_kernel(now=False)
    assert gone_within(pids, 10) == []
    client.wait_for_ready(timeout=60)
    pids = launched_pids(client)
    manager.shutdown_kernel(now=False)
    assert gone_within(pids, 10) == []


def test_sigkilled_kernel_leaves_no_worker_behind(kernel):
    manager, client = kernel
    pids = launched_pids(client)
    manager.provisioner.process.send_signal(signal.SIGKILL)  # atexit never runs: the watchdog must act
    assert gone_within(pids, 10) == []


# The same run in a private network: the namespace's holder and its user-mode networking must end too.
LAUNCH_PRIVATE = LAUNCH.replace("n=2)", "n=2, network='private')") + """
network = run.launcher.private
print('PIDS', *pids, network.holder.pid, *([network.tool.pid] if network.tool else []))
"""


def test_sigkilled_kernel_leaves_no_private_network_behind(kernel):
    from kwnb.backends import netns

    found = netns.support()
    if not found.possible:
        pytest.skip(f"no private network here: {found.forbidden_by}")
    manager, client = kernel
    pids = launched_pids(client, LAUNCH_PRIVATE, count=5 + bool(found.tool))
    manager.provisioner.process.send_signal(signal.SIGKILL)
    assert gone_within(pids, 10) == []


# Warm interpreters waiting for the next run: a SIGKILLed kernel must leave none behind either.
LAUNCH_WARM = """
import kwnb, pathlib, time
from kwnb.backends import warm_room
from kwnb.backends.warm import POOL
warm_room.BUSY_SHARE = float("inf")  # about cleanup, not when the pool refills: not waiting for quiet CPUs
pathlib.Path('quick.py').write_text("print('done')\\n")
run = kwnb.launch('quick.py', n=2, warm=True)
run.wait(60)
deadline = time.time() + 60
while time.time() < deadline and len(POOL.status()) < 2:
    time.sleep(0.2)
print('PIDS', *[warm['pid'] for warm in POOL.status()])
"""


def test_sigkilled_kernel_leaves_no_warm_interpreter_behind(kernel):
    manager, client = kernel
    pids = launched_pids(client, LAUNCH_WARM, count=2)
    manager.provisioner.process.send_signal(signal.SIGKILL)
    assert gone_within(pids, 10) == []
