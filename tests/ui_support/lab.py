"""A throw-away JupyterLab or Notebook 7 server for browser tests: loopback only, a token, its own settings.

Nothing of the user's ~/.jupyter or ~/.local/share/jupyter/lab settings is read, nothing is
fetched from outside (no news, no update check, no extension listing), and the server, its
kernels and their kwnb workers end with the context manager. A test's own kernel specs go in the
server's own data folder (JUPYTER_PATH), never the user's.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
LIGHT, DARK = "JupyterLab Light", "JupyterLab Dark"
# The browser scenarios' training scripts end each step with a sleep: the page's checks need a run's time, not its
# work (docs/testing.md, "Less work where the time is the claim"); `callbacks=[Paced()]` in their fit.
PACED = """
class Paced(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_settings(settings_dir: Path, theme: str = LIGHT) -> None:
    """User settings as JupyterLab stores them: one <plugin>.jupyterlab-settings file per plugin."""
    plugins = {
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/apputils-extension/themes": {"theme": theme, "adaptive-theme": False},
        "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
        # Output as it arrives, whole: no "show more outputs" trimming, no virtual scrolling.
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }
    for name, values in plugins.items():
        path = settings_dir / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


class Lab:
    def __init__(self, root: Path, home: Path, port: int, token: str, process: subprocess.Popen):
        self.root, self.home, self.port, self.token, self.process = root, home, port, token, process
        self.settings_dir = home / "settings"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def set_theme(self, theme: str) -> None:
        write_settings(self.settings_dir, theme)


# The app a server runs (python -m MODULE), its configurable class, and what to call it in errors.
APPS = {"jupyterlab": ("LabApp", "jupyter lab"), "notebook": ("JupyterNotebookApp", "jupyter notebook")}


def jupyterlab(root: Path, home: Path, theme: str = LIGHT, timeout: float = 60.0, kernels: dict | None = None):
    """Start `jupyter lab` serving `root`, with `kernels` (name: kernel.json) beside the venv's; yield a Lab once
    its REST API answers."""
    return jupyter_server("jupyterlab", root, home, theme, timeout, kernels)


def notebook7(root: Path, home: Path, theme: str = LIGHT, timeout: float = 60.0):
    """Start `jupyter notebook` (Notebook 7, built from JupyterLab's parts: the same settings files)."""
    return jupyter_server("notebook", root, home, theme, timeout)


@contextlib.contextmanager
def jupyter_server(app: str, root: Path, home: Path, theme: str = LIGHT, timeout: float = 60.0,
                   kernels: dict | None = None):
    """Start `python -m app` serving `root`; yield a Lab once its REST API answers."""
    app_class, called = APPS[app]
    port, token = free_port(), secrets.token_hex(16)
    for sub in ("settings", "workspaces", "config", "runtime", "data"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    for name, spec in (kernels or {}).items():
        (home / "data" / "kernels" / name).mkdir(parents=True)
        (home / "data" / "kernels" / name / "kernel.json").write_text(json.dumps(spec))
    write_settings(home / "settings", theme)
    # news_url must be None (not ""), which only a config file can say. Notebook 7 loads JupyterLab's
    # server extension as well, so this holds for both.
    (home / "config" / "jupyter_server_config.json").write_text(json.dumps({"LabApp": {
        "news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
        "extension_manager": "readonly"}}))
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(home / "config"),          # not the user's ~/.jupyter
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               JUPYTER_PATH=str(home / "data"),                  # searched first for kernel specs
               JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
    command = [
        sys.executable, "-m", app,
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}", "--ServerApp.terminals_enabled=False",
        f"--{app_class}.user_settings_dir={home / 'settings'}", f"--{app_class}.workspaces_dir={home / 'workspaces'}",
        "--LanguageServerManager.autodetect=False",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log_path = home / f"{app}.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    lab = Lab(root, home, port, token, process)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{called} exited with {process.returncode}: {tail(log_path)}")
            try:
                with urllib.request.urlopen(lab.url("api/status"), timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{called} did not answer in {timeout:.0f} s: {tail(log_path)}")
            time.sleep(0.25)
        yield lab
    finally:
        stop(process)
        log.close()


def stop(process: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM: the server shuts its kernels down (and kwnb, in each, its workers); KILL if it hangs."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
