"""kwnb under another interpreter than the suite's own: the venvs `make test` builds beside the main one
(.venv-colab on Python 3.13, .venv-py310 and .venv-py312), their Pythons found as the Makefile finds them, and
what the tests run there."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Imports every module of kwnb but its entry point (`python -m kwnb` runs the CLI): none needs TensorFlow, jax or
# Ray to import (they are imported where used), so the venvs without them import it whole.
IMPORT_ALL = """
import importlib, pkgutil, kwnb
names = [m.name for m in pkgutil.walk_packages(kwnb.__path__, "kwnb.") if m.name != "kwnb.__main__"]
for name in names:
    importlib.import_module(name)
print(len(names), kwnb.__file__)
"""


def python_of(version: str) -> Path | None:
    """A python`version` on PATH that runs (a pyenv shim may not), else pyenv's own: the Makefile's find_python."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}"), *sorted(pyenv.glob(f"versions/{version}*/bin/python{version}"))]
    for candidate in filter(None, candidates):
        try:
            if subprocess.run([candidate, "-c", "import venv"], capture_output=True, timeout=60).returncode == 0:
                return Path(candidate)
        except (OSError, subprocess.SubprocessError):
            continue
    return None


def checkout_env(**more: str) -> dict[str, str]:
    """The environment of a process of another venv: this checkout's kwnb, whichever its editable install names,
    and none of this pytest's variables (a pytest run there is a session of its own)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    return {**env, "PYTHONPATH": str(ROOT), **more}
