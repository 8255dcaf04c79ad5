"""A throw-away classic Notebook 6 server for the browser test: Colab's runtime (.venv-colab) serving this
checkout's kwnb, on loopback with a token and its own config, data, runtime and IPython folders.

Notebook 6.5 is its own tornado server (notebook.notebookapp), not jupyter_server: its options are
NotebookApp's. widgetsnbextension is enabled as pip's install of it leaves it, by the
etc/jupyter/nbconfig/notebook.d/widgetsnbextension.json it puts under the venv's prefix, which stays read
with JUPYTER_CONFIG_DIR elsewhere. The kernel (the server's own interpreter) inherits its environment,
so PYTHONPATH puts this checkout's kwnb before the venv's editable install of another.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path

from .lab import Lab, free_port, stop, tail

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def notebook6(python: Path, root: Path, home: Path, timeout: float = 60.0):
    """Start `python -m notebook` (6.5) serving `root`; yield a Lab once its REST API answers."""
    port, token = free_port(), secrets.token_hex(16)
    folders = {name: home / name for name in ("config", "data", "runtime", "ipython")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "JUPYTER"))}
    env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
               JUPYTER_CONFIG_DIR=str(folders["config"]), JUPYTER_DATA_DIR=str(folders["data"]),
               JUPYTER_RUNTIME_DIR=str(folders["runtime"]), IPYTHONDIR=str(folders["ipython"]))
    command = [str(python), "-m", "notebook", "--NotebookApp.ip=127.0.0.1", f"--NotebookApp.port={port}",
               "--NotebookApp.port_retries=0", f"--NotebookApp.token={token}", "--NotebookApp.open_browser=False",
               f"--NotebookApp.notebook_dir={root}", "--NotebookApp.terminals_enabled=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log_path = home / "notebook6.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        server = Lab(root, home, port, token, process)
        try:
            wait_answering(server, log_path, timeout)
            yield server
        finally:
            stop(process)


def wait_answering(server: Lab, log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"jupyter notebook 6 exited with {server.process.returncode}: {tail(log_path)}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(server.url("api/status"), timeout=2) as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jupyter notebook 6 did not answer in {timeout:.0f} s: {tail(log_path)}")
        time.sleep(0.25)
