"""Where the tests find the Colab environment (`make colab-env`: constraints/colab.txt held, kwnb installed
in it), or why it is missing: the tests that need it skip saying so."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

from interpreter_support import ROOT, python_of

COLAB_VENV = ROOT / ".venv-colab"
COLAB_PYTHON = COLAB_VENV / "bin" / "python"
CONSTRAINTS = ROOT / "constraints" / "colab.txt"


def held_versions() -> dict[str, str]:
    """The versions constraints/colab.txt holds, by normalised name."""
    pins = [line.split("#")[0].strip() for line in CONSTRAINTS.read_text().splitlines()]
    return {normalised(name): version for name, version in (pin.split("==") for pin in pins if pin)}


def normalised(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def colab_python() -> Path:
    """The Colab environment's interpreter; skips the test, saying why, where there is none."""
    if not (COLAB_VENV / ".kwnb-installed").exists():
        why = ("no python3.13 on this machine (Colab's runtime is Python 3.13)" if python_of("3.13") is None else
               f"{COLAB_VENV} is not built: `make colab-env` builds it")
        pytest.skip(why)
    return COLAB_PYTHON


def run_in(python: Path, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def kernel_of(python: Path, folder: Path) -> KernelManager:
    """A kernel of that interpreter, from a kernel spec of its own under `folder`."""
    spec = folder / "kernels" / "under-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({python})", "language": "python"}))
    return KernelManager(kernel_name="under-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder / "kernels")]))
