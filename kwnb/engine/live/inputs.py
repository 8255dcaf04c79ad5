"""What a launch is given, checked before anything starts: the script and the Python that runs it.
The environment every task gets is built in machine/task_env.py."""
from __future__ import annotations

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

