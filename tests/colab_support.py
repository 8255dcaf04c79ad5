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
# Colab's runtime with ipywidgets 8 in place of its 7.7.1 (`make colab-widgets8-env`: a venv over .venv-colab's
# packages): ipykernel 6.17 in JupyterLab 4, whose widget manager draws ipywidgets 8's widgets only.
COLAB_WIDGETS8_VENV = ROOT / ".venv-colab-widgets8"
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


def colab_widgets8_python() -> Path:
    """The interpreter of Colab's runtime with ipywidgets 8; skips the test, saying why, where there is none."""
    colab_python()
    if not (COLAB_WIDGETS8_VENV / ".kwnb-installed").exists():
        pytest.skip(f"{COLAB_WIDGETS8_VENV} is not built: `make colab-widgets8-env` builds it")
    return COLAB_WIDGETS8_VENV / "bin" / "python"


def kernel_spec(python: Path, display_name: str = "", **env: str) -> dict:
    """A kernel.json that starts ipykernel in that interpreter, with `env` added to the server's environment."""
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": display_name or f"Python ({python})", "language": "python"}
    return {**spec, "env": env} if env else spec


def run_in(python: Path, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def kernel_of(python: Path, folder: Path) -> KernelManager:
    """A kernel of that interpreter, from a kernel spec of its own under `folder`."""
    spec = folder / "kernels" / "under-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps(kernel_spec(python)))
    return KernelManager(kernel_name="under-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder / "kernels")]))
