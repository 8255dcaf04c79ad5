"""A real Jupyter kernel (ipykernel, started with jupyter_client) that the benchmark drives cell by cell.

The kernel is measured from outside with psutil (CPU seconds of its process, all threads, and its
resident memory), so the measurement itself costs the kernel nothing.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psutil

from .common import ROOT
from .hooks import (RUN_DONE, RUN_ENDED_AT, RUN_STARTED_AT, SCREEN_TOTAL_LINES, SETTLE, TASK_ADDRESS, TASK_PORT_OPEN_AT,
                    TASK_SCREEN)


class KernelError(RuntimeError):
    pass


class Kernel:
    def __init__(self, cwd: Path, startup_timeout: float = 120.0):
        from jupyter_client.manager import KernelManager

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=startup_timeout)
        self.pid = int(self.execute("import os; print(os.getpid())").strip())
        self.process = psutil.Process(self.pid)

    def execute(self, code: str, timeout: float = 600.0) -> str:
        """Run one cell; returns its stdout. A cell that raises raises KernelError here."""
        out, errors = [], []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content.get("name") == "stdout":
                out.append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=hook, allow_stdin=False,
                                                store_history=False)
        if reply["content"]["status"] != "ok" or errors:
            raise KernelError("; ".join(errors) or reply["content"].get("evalue", "cell failed"))
        return "".join(out)

    def execute_json(self, code: str, timeout: float = 600.0):
        """Run a cell whose last stdout line is JSON; returns it parsed."""
        text = self.execute(code, timeout).strip().splitlines()
        return json.loads(text[-1])

    def cpu_seconds(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def rss(self) -> int:
        return self.process.memory_info().rss

    def close(self) -> None:
        try:
            self.client.stop_channels()
        finally:
            self.manager.shutdown_kernel(now=False)


class RssSampler:
    """The kernel's resident memory every `interval` s while a run goes on: its peak is what counts."""

    def __init__(self, process: psutil.Process, interval: float = 0.05):
        self.process, self.interval = process, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-rss")

    def _loop(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)


SETUP = f"""
%load_ext kwnb
import json, os, re, subprocess, sys, time
import portpicker
import kwnb, {SETTLE.module}
from IPython.display import display
_bench = {{}}
print("ready")
"""

# Launch cells return at once, as `%%kw_worker` does; a last cell waits. The kernel's CPU is read
# before the first and after the last. kwnb's dashboard is displayed by a cell of its own, once the
# port probe has the addresses: displayed first, it delayed the probe past the ports of a job that
# ends within a second (the smoke run's stand-in job).
KWNB_LAUNCH = """
_t0 = time.time()
_run = kwnb.launch({script!r}, n={n}, name={name!r}, runs_dir={runs!r}, args={args!r})
print(json.dumps({{"t0": _t0, "addresses": [w.{address} for w in _run.workers],
                  "logs": [str(w.log_path) for w in _run.workers]}}))
"""
KWNB_SHOW = """
display(_run)  # the live dashboard: its thread refreshes the widgets while the run goes on
"""

KWNB_WAIT = """
_run.wait({timeout})
if not _run.{done}:
    _run.stop("benchmark timeout")
{settle}(_run)
print(json.dumps({{"codes": _run.exit_codes, "total_lines": [w.{screen}.{total_lines} for w in _run.workers],
                  "port_open_at": [w.{port_open_at} for w in _run.workers],
                  "started": _run.{started_at}, "ended": _run.{ended_at}}}))
"""
# The kwnb names the two cells above use (benchmarks/hooks.py), filled in with their other fields.
HOOKED = {"address": TASK_ADDRESS.name, "done": RUN_DONE.name, "settle": SETTLE.path, "screen": TASK_SCREEN.name,
          "total_lines": SCREEN_TOTAL_LINES.name, "port_open_at": TASK_PORT_OPEN_AT.name,
          "started_at": RUN_STARTED_AT.name, "ended_at": RUN_ENDED_AT.name}

BARE_LAUNCH = """
_t0 = time.time()
_n, _folder = {n}, {folder!r}
os.makedirs(_folder, exist_ok=True)
_addresses = [f"localhost:{{portpicker.pick_unused_port()}}" for _ in range(_n)]
_procs = []
for _i in range(_n):
    _env = dict(os.environ, **{env!r})
    _env["TF_CONFIG"] = json.dumps({{"cluster": {{"worker": _addresses}}, "task": {{"type": "worker", "index": _i}}}})
    with open(os.path.join(_folder, f"worker-{{_i}}.log"), "ab") as _out:
        _procs.append(subprocess.Popen([sys.executable, "-u", {script!r}, *{args!r}], stdin=subprocess.DEVNULL,
                                       stdout=_out, stderr=subprocess.STDOUT, env=_env))
print(json.dumps({{"t0": _t0, "addresses": _addresses,
                  "logs": [os.path.join(_folder, f"worker-{{_i}}.log") for _i in range(_n)]}}))
"""

BARE_WAIT = """
_codes = []
for _p in _procs:
    try:
        _codes.append(_p.wait({timeout}))
    except subprocess.TimeoutExpired:
        _p.kill(); _codes.append("timeout")
print(json.dumps({{"codes": _codes, "ended": time.time()}}))
"""


def run_job(kernel: Kernel, method: str, script: str, n: int, args: list[str], name: str, folder: Path,
            timeout: float = 300.0, probe: bool = True, env: dict | None = None) -> dict:
    """One run of `script` on `n` workers started from the kernel by `method` ("kwnb" or "bare").

    Returns the kernel's CPU seconds and peak memory over launch + wait, the launch time t0 (the
    kernel's clock), the workers' addresses and logs, exit codes and when every port accepted.
    """
    from .common import WORKER_ENV, PortProbe, probe_hello

    folder.mkdir(parents=True, exist_ok=True)
    if method == "kwnb":
        launch = KWNB_LAUNCH.format(script=str(script), n=n, name=name, runs=str(folder / "runs"), args=list(args),
                                    **HOOKED)
        wait = KWNB_WAIT.format(timeout=timeout, **HOOKED)
    else:
        launch = BARE_LAUNCH.format(script=str(script), n=n, folder=str(folder / f"bare-{time.time_ns()}"),
                                    args=list(args), env=dict(env or WORKER_ENV))
        wait = BARE_WAIT.format(timeout=timeout)
    rss_before = kernel.rss()
    cpu_before = kernel.cpu_seconds()
    with RssSampler(kernel.process) as rss:
        started = kernel.execute_json(launch)
        port_probe = PortProbe(started["addresses"], hello=probe_hello(script)).start() if probe else None
        if method == "kwnb":
            kernel.execute(KWNB_SHOW)
        finished = kernel.execute_json(wait, timeout=timeout + 60)
    cpu_after = kernel.cpu_seconds()
    rss_after = kernel.rss()
    if port_probe is not None:
        port_probe.stop()
    t0 = started["t0"]
    all_open = port_probe.all_open_at() if port_probe else None
    return {
        "ok": all(c == 0 for c in finished["codes"]),
        "exit_codes": finished["codes"],
        "kernel_cpu_s": cpu_after - cpu_before,
        "rss_before_mb": rss_before / 2**20,
        "rss_peak_growth_mb": (max(rss.peak, rss_after) - rss_before) / 2**20,
        "rss_after_growth_mb": (rss_after - rss_before) / 2**20,
        "t0": t0,
        "run_s": finished["ended"] - t0 if finished.get("ended") else None,
        "ports_s": None if all_open is None else all_open - t0,
        "probe_late": bool(port_probe.already_open) if port_probe else False,
        "logs": started["logs"],
        "total_lines": finished.get("total_lines"),
        "port_open_at_set": None if "port_open_at" not in finished else [t is not None for t in finished["port_open_at"]],
    }
