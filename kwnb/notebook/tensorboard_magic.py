"""`%kw_tensorboard NAME [--logdir DIR]`: TensorBoard on a run's logs, inside the notebook.

TensorBoard's own notebook support does the work: `tensorboard.manager.start` (what `%tensorboard`
calls) starts it and knows the running instances, `tensorboard.notebook.display` shows it in the
output (through $TENSORBOARD_PROXY_URL behind JupyterHub). kwnb adds:
- one TensorBoard per log folder, reused while it answers;
- 127.0.0.1 only: TensorBoard has no authentication, so it must not listen on every interface;
- it stops with the kernel: at exit, and, when the kernel is killed outright, by a watchdog inside
  TensorBoard that sees its parent change (as kwnb's workers do);
- it runs without importing TensorFlow, on TensorBoard's own stub (about 80 MB and 1 s to start,
  against about 650 MB and 4 s with TensorFlow, measured here); local log folders need nothing more.
"""
from __future__ import annotations

import atexit
import datetime
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import KwnbError
from ..task.runfolder import RunFolder, find_run_dir

HOST = "127.0.0.1"
START_TIMEOUT = datetime.timedelta(seconds=60)  # TensorBoard's own default; it starts in about 1 s here
STOP_GRACE = 3.0  # seconds between TERM and KILL, as for kwnb's tasks

# Run by TensorBoard's manager as $TENSORBOARD_BINARY (through a /bin/sh line, so any path works).
_SERVER = '''"""TensorBoard for kwnb's %kw_tensorboard: ends when the kernel that started it is gone."""
import os, shutil, signal, sys, threading, time
# A process group of its own: at shutdown ipykernel TERMs the children in its group and waits while any
# is listed, zombies too, so Jupyter killed the kernel after 2.5 s, before its atexit handlers ran.
os.setpgid(0, 0)
sys.modules["tensorflow"] = None  # TensorBoard then uses its own stub: 80 MB instead of 650 MB
kernel = os.getppid()

def watch():
    while os.getppid() == kernel:
        time.sleep(0.5)
    shutil.rmtree(os.path.dirname(os.path.abspath(__file__)), ignore_errors=True)  # the kernel cannot now
    os.kill(os.getpid(), signal.SIGTERM)  # TensorBoard's handler runs atexit, which removes its info file

threading.Thread(target=watch, daemon=True).start()
from tensorboard.main import run_main
run_main()
'''


@dataclass
class Served:
    logdir: Path
    port: int
    pid: int
    reused: bool = False

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"


_started: dict[Path, Served] = {}  # what this kernel started, by log folder
_lock = threading.Lock()
_launcher_dir: Path | None = None


def serve(logdir: Path) -> Served:
    """The TensorBoard of this kernel on `logdir`, started unless one already answers."""
    from tensorboard import manager

    with _lock:
        known = _started.get(logdir)
        if known and _answers(known.port) and any(info.pid == known.pid for info in manager.get_all()):
            return Served(known.logdir, known.port, known.pid, reused=True)
        for attempt in (1, 2):  # a port taken between choosing it and TensorBoard binding it: once more
            arguments = ["--logdir", str(logdir), "--host", HOST, "--port", str(_free_port())]
            result = _start(manager, arguments)
            port_taken = isinstance(result, manager.StartFailed) and "in use" in (result.stderr or "")
            if not (port_taken and attempt == 1):
                break
        if not isinstance(result, manager.StartLaunched):
            raise UsageError(_failure(result))
        _unlink_output_files(result.info.pid)
        _started[logdir] = Served(logdir, result.info.port, result.info.pid)
        return _started[logdir]


def _start(manager, arguments: list[str]):
    """manager.start with our launcher as $TENSORBOARD_BINARY, unless the user chose a binary."""
    if os.environ.get("TENSORBOARD_BINARY"):
        return manager.start(arguments, timeout=START_TIMEOUT)
    os.environ["TENSORBOARD_BINARY"] = str(_launcher())
    try:
        return manager.start(arguments, timeout=START_TIMEOUT)
    finally:
        os.environ.pop("TENSORBOARD_BINARY", None)


def _launcher() -> Path:
    global _launcher_dir
    if _launcher_dir is None or not _launcher_dir.is_dir():
        _launcher_dir = Path(tempfile.mkdtemp(prefix="kwnb-tensorboard-"))  # private: 0700
        (_launcher_dir / "server.py").write_text(_SERVER)
        shell = _launcher_dir / "tensorboard"
        shell.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} '
                         f'{shlex.quote(str(_launcher_dir / "server.py"))} "$@"\n')
        shell.chmod(0o700)
    return _launcher_dir / "tensorboard"


def _unlink_output_files(pid: int) -> None:
    """The manager gives TensorBoard temporary files as stdout and stderr and never removes them (two per
    start, in /tmp); once it runs, only TensorBoard writes there, to the files it holds open."""
    for fd in (1, 2):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")  # Linux; elsewhere they stay, as with %tensorboard
            if os.path.basename(path).startswith((".tensorboard-stdout-", ".tensorboard-stderr-")):
                os.unlink(path)
        except OSError:
            pass


def _failure(result) -> str:
    name = type(result).__name__
    if name == "StartFailed":
        lines = [line for line in (result.stderr or "").splitlines() if line.strip()]
        return f"TensorBoard exited with {result.exit_code}: {lines[-1] if lines else 'no message'}"
    if name == "StartExecFailed":
        return f"cannot start TensorBoard: {result.os_error}"
    if name == "StartTimedOut":
        return f"TensorBoard (pid {result.pid}) did not answer within {START_TIMEOUT.seconds} s"
    return f"TensorBoard did not start: {result}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def stop_all() -> None:
    """Stop every TensorBoard this kernel started: TERM, then KILL after STOP_GRACE (at exit, and for tests)."""
    with _lock:
        served = list(_started.values())
        _started.clear()
    for one in served:
        _stop(one.pid)
    if _launcher_dir is not None:
        shutil.rmtree(_launcher_dir, ignore_errors=True)


def _stop(pid: int) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            if _gone(pid):
                return
            time.sleep(0.05)
    _remove_stale_info(pid)  # KILLed: TensorBoard could not remove its own


def _gone(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid  # our child: reap it, or it stays a zombie
    except ChildProcessError:  # already reaped (subprocess does it for dropped Popen objects)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


def _remove_stale_info(pid: int) -> None:
    from tensorboard import manager

    try:
        os.unlink(os.path.join(manager._get_info_dir(), f"pid-{pid}.info"))
    except OSError:
        pass


atexit.register(stop_all)


def logdir_of(name: str | None, logdir: str | None) -> tuple[Path, str]:
    """The folder to open and what to call it: --logdir, else the common folder of the run's event files."""
    if logdir:
        path = Path(logdir).expanduser().resolve()
        if not path.is_dir():
            raise UsageError(f"--logdir {logdir}: no such folder")
        return path, str(logdir)
    if not name:
        raise UsageError("give a run name, or --logdir DIR")
    from ..engine.readers.tensorboard import event_folders

    roots, since, where = _run_roots(name)
    folders = event_folders(roots, since)
    if not folders:
        raise UsageError(f"run {name!r} has written no TensorBoard event files yet ({where}); "
                         f"pass --logdir DIR to open TensorBoard on a folder anyway")
    return Path(os.path.commonpath(folders)), f"run {name!r}"


def _run_roots(name: str) -> tuple[list, float, str]:
    """Where a run's event files can be, and since when: a run of this kernel, else a run folder."""
    from .. import api

    if any(run.name == name for run in api.runs()):
        run = api.get_run(name)
        explicit = run.settings.logdir  # the launch option's folder, if given
        roots, since = ([explicit] if explicit else [run.dir, run.cwd]), run.started_at or 0.0
    else:
        try:
            folder = find_run_dir(name)
        except KwnbError as error:
            raise UsageError(str(error)) from None
        description = RunFolder(folder).description  # written when the run was launched
        roots, since = [folder, json.loads(description.read_text()).get("cwd")], description.stat().st_mtime
    where = ", ".join(str(root) for root in roots if root)
    return roots, since, f"looked in {where} for files newer than the run"


@magics_class
class TensorBoardMagics(Magics):
    @line_magic
    @magic_arguments()
    @argument("name", nargs="?", default=None, help="a run of this kernel, or a run folder")
    @argument("--logdir", default=None, metavar="DIR", help="the folder to open (default: where the run's "
              "event files are: the common folder of those written since it started)")
    @argument("--height", type=int, default=600, metavar="PX", help="height of the TensorBoard frame")
    def kw_tensorboard(self, line):
        """Open TensorBoard on a run's logs in the output, on 127.0.0.1; one per folder, reused; it stops
        with the kernel. Behind JupyterHub set TENSORBOARD_PROXY_URL (jupyter-server-proxy), e.g.
        /user/NAME/proxy/%PORT%/."""
        args = parse_argstring(self.kw_tensorboard, line)
        try:
            import tensorboard.notebook
        except ImportError:
            raise UsageError("TensorBoard is not installed: pip install tensorboard") from None
        logdir, label = logdir_of(args.name, args.logdir)
        served = serve(logdir)
        what = "already serves" if served.reused else "serves"
        print(f"kwnb: TensorBoard {what} {label} ({logdir}) at {served.url} (pid {served.pid}; "
              f"it stops with the kernel)")
        proxy = os.environ.get("TENSORBOARD_PROXY_URL")
        if proxy:
            print("kwnb: the frame loads it through TENSORBOARD_PROXY_URL:", proxy.replace("%PORT%", str(served.port)))
        tensorboard.notebook.display(port=served.port, height=args.height)
