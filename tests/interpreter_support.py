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

# The unit tests that need no TensorFlow (not marked slow), run again under each other Python (tests/test_pythons.py;
# tests/test_colab_env.py runs them and more on 3.13): the launch settings and options, a task's environment (a real
# local 2-task run among them), the cluster's plan, GPUs and limits as tasks get them, and the readers of
# TensorFlow's output (the terminal's rendering, its messages, the curves) on kept logs. 675 tests in 14 s of pytest
# a Python here (10 CPU-s).
UNIT_TESTS = ["tests/test_settings.py", "tests/test_backends.py", "tests/test_task_env.py", "tests/test_cluster.py",
              "tests/test_gpus.py", "tests/test_limits.py", "tests/test_sizes.py", "tests/test_terminal.py",
              "tests/test_line_path.py", "tests/test_tf_messages.py", "tests/test_metrics.py"]


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
