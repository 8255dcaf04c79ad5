"""kwnb on Colab's runtime as Google publishes it (constraints/colab.txt, built by `make colab-env` into
.venv-colab): installing kwnb changes none of the versions Colab holds, and the first two notebooks run
headless in a kernel of that environment (ipykernel 6.17, IPython 7.34, ipywidgets 7.7.1, Python 3.13), each
training cell showing its dashboard and no cell an error. Skipped, saying why, where python3.13 or the
environment is missing."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from colab_support import ROOT, colab_python, held_versions, kernel_of, normalised, run_in

NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT = 600  # s: notebook 01 trains a baseline in the kernel, then two 2-worker runs, on 2 loaded cores
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
VERSIONS = "import sys, IPython, ipykernel, ipywidgets\nprint(sys.version_info[:2], IPython.__version__, ipykernel.__version__, ipywidgets.__version__)"


def installed(python: Path) -> dict[str, str]:
    frozen = run_in(python, "-m", "pip", "list", "--format", "json")
    assert frozen.returncode == 0, frozen.stderr
    return {normalised(p["name"]): p["version"] for p in json.loads(frozen.stdout)}


def test_the_colab_environment_holds_colabs_versions_with_kwnb_installed():
    python = colab_python()
    versions = installed(python)
    assert versions.get("kwnb") == "0.1.0"
    assert {name: versions.get(name) for name in held_versions()} == held_versions()
    assert run_in(python, "-c", "import sys; print(sys.version_info[:2])").stdout.strip() == "(3, 13)"


def test_a_learners_unheld_pip_install_of_kwnb_replaces_nothing_colab_holds():
    """As `!pip install kwnb[tf]` in a Colab cell would, without the constraints: pip's own plan (--dry-run)
    installs kwnb and nothing else that Colab pins."""
    plan = run_in(colab_python(), "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", "-e", f"{ROOT}[tf]")
    assert plan.returncode == 0, plan.stderr[-3000:]
    changed = {normalised(item["metadata"]["name"]): item["metadata"]["version"]
               for item in json.loads(plan.stdout)["install"]}
    assert changed == {"kwnb": "0.1.0"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["00_hello_cluster.ipynb", "01_multi_worker_keras.ipynb"])
def test_the_first_notebooks_run_in_a_colab_kernel_with_their_dashboards(name, tmp_path):
    colab_python()
    shutil.copy(NOTEBOOKS / name, tmp_path)
    notebook = nbformat.read(tmp_path / name, as_version=4)
    notebook.cells.insert(0, new_code_cell(VERSIONS))
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_CURRENT_TEST", "PYTHONPATH")}
    env["KWNB_OFFLINE"] = "1"  # the shipped MNIST sample: no download in a test
    NotebookClient(notebook, timeout=CELL_TIMEOUT, km=kernel_of(colab_python(), tmp_path),
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code[0].outputs[0].text.strip() == "(3, 13) 7.34.0 6.17.1 7.7.1"
    errors = [output for cell in code for output in cell.outputs
              if output.output_type == "error" or "Traceback" in output.get("text", "")]
    assert errors == []
    training = [cell for cell in code if cell.source.startswith("%%kw_worker")]
    assert training
    for cell in training:
        views = [output for output in cell.outputs if WIDGET_VIEW in output.get("data", {})]
        assert len(views) == 1, cell.source[:80]
