"""The live mode for front ends that paint only what the running cell sends (Colab: googlecolab/colabtools#3373),
in a real kernel, as Colab's front end would see it: `%%kw_worker` keeps its cell running until the run ends,
every widget update arrives as a comm message of that cell (its parent header) and none is sent from
another thread; interrupting the cell stops the run's tasks. On Colab (found by its `google.colab`, here a
stand-in package on the test kernel's path only) the mode is chosen by itself and Colab's custom widget
manager is enabled; KWNB_LIVE chooses it anywhere. Each test runs in the main venv (IPython 9, ipykernel 7,
ipywidgets 8) and in the Colab environment (IPython 7.34, ipykernel 6.17, ipywidgets 7.7.1), which skips,
saying why, where it is not built."""
from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from colab_support import ROOT, colab_python, kernel_of

PYTHONS = pytest.mark.parametrize("python", [lambda: Path(sys.executable), colab_python], ids=["main", "colab"])
TIMEOUT = 120  # s: a kernel's start and a 2-task run of a script without TensorFlow, on 2 loaded cores

RECORD_SENDS = """
import threading, ipywidgets
cell_thread, sends = threading.get_ident(), []
_send_state = ipywidgets.Widget.send_state
def _recorded(self, key=None):
    sends.append((threading.current_thread().name if threading.get_ident() != cell_thread else "cell", self.model_id))
    return _send_state(self, key)
ipywidgets.Widget.send_state = _recorded
import kwnb
%load_ext kwnb
"""


def job(pids: Path, steps: int) -> str:
    """A 2-task job that writes each task's pid, then prints a Keras progress line (a step, its loss) every 0.2 s."""
    return textwrap.dedent(f"""\
        %%kw_worker job.py -n 2
        import os, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        print("Epoch 1/1", flush=True)
        for step in range(1, {steps} + 1):
            print(f"{{step}}/{steps} [==>.......] - ETA: 1s - loss: {{1 / step:.4f}}", flush=True)
            time.sleep(0.2)
        """)


class Kernel:
    """A kernel of one interpreter, and every iopub message of each cell it runs."""

    def __init__(self, python: Path, folder: Path, env: dict[str, str]):
        self.manager = kernel_of(python, folder)
        self.manager.start_kernel(cwd=str(folder), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=TIMEOUT)

    def run(self, code: str, interrupt_when=None) -> tuple[list[dict], dict]:
        """The cell's iopub messages until it is idle, and its reply; `interrupt_when(messages)` true: interrupt once."""
        msg_id = self.client.execute(code)
        messages, deadline, interrupted = [], time.monotonic() + TIMEOUT, False
        while time.monotonic() < deadline:
            message = self.client.get_iopub_msg(timeout=TIMEOUT)
            message["received"] = time.monotonic()
            messages.append(message)
            if message["parent_header"].get("msg_id") == msg_id and message["msg_type"] == "status" \
                    and message["content"]["execution_state"] == "idle":
                return messages, self.reply(msg_id)
            if interrupt_when is not None and not interrupted and interrupt_when(messages):
                interrupted = True
                self.manager.interrupt_kernel()
        raise AssertionError(f"the cell did not end in {TIMEOUT} s")

    def reply(self, msg_id: str) -> dict:
        """The cell's reply (a kernel_info reply of the start may come first)."""
        while True:
            reply = self.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]

    def value(self, expression: str) -> str:
        messages, reply = self.run(f"print(repr({expression}))")
        if reply["status"] == "aborted":  # ipykernel 6 drops what comes just after an error (stop_on_error)
            time.sleep(0.5)
            messages, reply = self.run(f"print(repr({expression}))")
        assert reply["status"] == "ok", reply
        return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream").strip()

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel_env(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("KWNB_", "PYTEST_"))}
    return {**env, "PYTHONPATH": str(ROOT), "KWNB_WARM": "0", "KWNB_RUNS_DIR": str(tmp_path / "runs")}


def fake_colab(folder: Path) -> Path:
    """A `google.colab` whose output.enable_custom_widget_manager() counts its calls: for the test kernel only."""
    package = folder / "fake-colab" / "google" / "colab"  # no google/__init__.py: it joins protobuf's namespace
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "output.py").write_text("calls = []\ndef enable_custom_widget_manager():\n    calls.append(1)\n")
    return folder / "fake-colab"


def updates_of(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["msg_type"] == "comm_msg" and m["content"]["data"].get("method") == "update"]


@pytest.mark.slow
@PYTHONS
def test_on_colab_the_cell_follows_the_run_and_sends_every_update_itself(python, tmp_path, kernel_env):
    interpreter = python()
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel_env["PYTHONPATH"] += os.pathsep + str(fake_colab(tmp_path))  # Colab found: no KWNB_LIVE set
    kernel = Kernel(interpreter, tmp_path, kernel_env)
    try:
        assert kernel.run(RECORD_SENDS)[1]["status"] == "ok"
        started = time.monotonic()
        messages, reply = kernel.run(job(pids, steps=15))
        took = time.monotonic() - started
        assert reply["status"] == "ok", reply
        assert kernel.value("kwnb.get_run('job').status == 'finished'") == "True"
        assert kernel.value("sorted({thread for thread, _ in sends})") == "['cell']", "a widget changed in another thread"
        # The curves, drawn in a thread of their own while the run went and at its end, shown by the cell.
        curves = "next(iter(__import__('kwnb.notebook.dashboard').notebook.dashboard._dashboards.values())).curves.model_id"
        assert int(kernel.value(f"sum(model == {curves} for _, model in sends)")) >= 2
        assert kernel.value("__import__('google.colab.output').colab.output.calls") == "[1]"
        later, _ = kernel.run("import time; time.sleep(1.5)")  # a dashboard thread would go on sending
    finally:
        kernel.close()
    assert took >= 15 * 0.2, "the cell returned before the run ended"
    cell = next(m["parent_header"]["msg_id"] for m in messages if m["msg_type"] == "execute_input")
    updates = updates_of(messages)
    assert len(updates) >= 4, "the dashboard was not kept current while the run went"
    assert {m["parent_header"]["msg_id"] for m in updates} == {cell}
    assert updates_of(later) == []
    views = [m for m in messages if "application/vnd.jupyter.widget-view+json" in m["content"].get("data", {})]
    assert [m["msg_type"] for m in views] == ["display_data", "update_display_data"]  # shown, then its end
    assert len(list(pids.iterdir())) == 2


@pytest.mark.slow
@PYTHONS
def test_interrupting_the_cell_stops_the_run(python, tmp_path, kernel_env):
    interpreter = python()
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel = Kernel(interpreter, tmp_path, {**kernel_env, "KWNB_LIVE": "cell"})
    try:
        assert kernel.run(RECORD_SENDS)[1]["status"] == "ok"
        going = lambda messages: len(list(pids.iterdir())) == 2 and len(updates_of(messages)) >= 3  # noqa: E731
        messages, reply = kernel.run(job(pids, steps=600), interrupt_when=going)
        status = kernel.value("kwnb.get_run('job').status == 'stopped'")
        tasks = [int(path.name) for path in pids.iterdir()]
        left = [pid for pid in tasks if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert kernel.value("sorted({thread for thread, _ in sends})") == "['cell']"
    finally:
        kernel.close()
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    printed = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert "kwnb: interrupted; stopping run 'job'" in printed
    assert status == "True" and len(tasks) == 2 and left == []


@pytest.mark.slow
def test_kw_show_of_a_run_that_goes_on_follows_it_from_its_cell_too(tmp_path, kernel_env):
    """A run started by `kwnb.launch` (which shows nothing) and shown by `%kw_show` where the front end paints only
    the running cell's output: that cell follows the run to its end, every update its own."""
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel = Kernel(Path(sys.executable), tmp_path, {**kernel_env, "KWNB_LIVE": "cell"})
    try:
        assert kernel.run(RECORD_SENDS)[1]["status"] == "ok"
        written = job(pids, steps=25).replace("%%kw_worker job.py -n 2", "%%kw_file job.py")
        assert kernel.run(written)[1]["status"] == "ok"
        assert kernel.run("run = kwnb.launch('job.py', n=2)")[1]["status"] == "ok"
        messages, reply = kernel.run("%kw_show job")
        status = kernel.value("kwnb.get_run('job').status.value")
        threads = kernel.value("sorted({thread for thread, _ in sends})")
    finally:
        kernel.close()
    assert reply["status"] == "ok" and status == "'finished'", "%kw_show returned before the run ended"
    assert threads == "['cell']"
    cell = next(m["parent_header"]["msg_id"] for m in messages if m["msg_type"] == "execute_input")
    assert len(updates_of(messages)) >= 2 and {m["parent_header"]["msg_id"] for m in updates_of(messages)} == {cell}


@pytest.mark.slow
def test_elsewhere_the_cell_returns_at_once_and_a_thread_keeps_the_dashboard(tmp_path, kernel_env):
    """Today's way, kept where Colab is not found (JupyterLab, Notebook, VS Code, nbclient)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    kernel = Kernel(Path(sys.executable), tmp_path, kernel_env)
    try:
        assert kernel.run(RECORD_SENDS)[1]["status"] == "ok"
        started = time.monotonic()
        _, reply = kernel.run(job(pids, steps=15))
        took = time.monotonic() - started
        kernel.run("kwnb.get_run('job').wait(60)")
        assert kernel.value("'kwnb-dashboard-job' in {thread for thread, _ in sends}") == "True"
    finally:
        kernel.close()
    assert reply["status"] == "ok" and took < 15 * 0.2


def test_kwnb_live_says_which_mode_and_a_wrong_word_is_refused(monkeypatch):
    from kwnb.errors import KwnbError
    from kwnb.notebook import live_mode

    monkeypatch.setattr(live_mode, "on_colab", lambda: True)
    for value, mode in [("", "cell"), ("auto", "cell"), ("thread", "thread"), ("Cell", "cell")]:
        monkeypatch.setenv("KWNB_LIVE", value)
        assert live_mode.live_mode() == mode
    monkeypatch.setattr(live_mode, "on_colab", lambda: False)
    monkeypatch.delenv("KWNB_LIVE")
    assert live_mode.live_mode() == "thread"
    monkeypatch.setenv("KWNB_LIVE", "colab")
    with pytest.raises(KwnbError, match="KWNB_LIVE must be one of auto, cell, thread, not 'colab'"):
        live_mode.live_mode()
