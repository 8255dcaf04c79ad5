"""What a launch is given, checked before anything starts: the script and the Python that runs it,
and the environment every task gets."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ...errors import OptionError


def check_script(script: Path) -> None:
    if script.is_dir():
        raise OptionError(f"{script} is a directory, not a Python script")
    if not script.is_file():
        raise OptionError(f"no script at {script}")
    source = script.read_text(encoding="utf-8", errors="replace")
    if not source.strip():
        raise OptionError(f"{script.name} is empty: there is nothing to run")
    try:
        compile(source, str(script), "exec")
    except SyntaxError as error:
        raise OptionError(f"{script.name} line {error.lineno}: SyntaxError: {error.msg}") from None


def find_python(python: str | None) -> str:
    if not python:
        return sys.executable
    found = shutil.which(python)
    if not found:
        raise OptionError(f"Python interpreter not found: {python}")
    return found


def task_env(gpus: bool = False) -> dict[str, str]:
    """Every task's environment, less what is per task (TF_CONFIG, kwnb's own variables) and the user's
    additions: also what the warm pool prepares interpreters with ahead of a first run (engine/live/prewarm.py)."""
    env = dict(os.environ)
    env.update({
        "TF_USE_LEGACY_KERAS": "1",  # Keras 3 cannot run MultiWorkerMirroredStrategy; tf-keras can
        "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg",  # the kernel's inline backend means nothing in a worker
    })
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = "-1"  # N workers on one GPU would fight over its memory
    return env
