"""kwnb on Colab's runtime as Google publishes it (constraints/colab.txt, built by `make colab-env` into
.venv-colab): installing kwnb changes none of the versions Colab holds; on its Python 3.13 every module of
kwnb imports and `kwnb run` runs a 2-task job; and the first two notebooks run headless in a kernel of that
environment (ipykernel 6.17, IPython 7.34, ipywidgets 7.7.1), each training cell showing its dashboard and no
cell an error. Skipped, saying why, where python3.13 or the environment is missing. The live mode meant for
Colab's front end is tested in this environment by tests/test_live_mode.py."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from colab_support import ROOT, colab_python, held_versions, kernel_of, normalised, run_in
from interpreter_support import IMPORT_ALL, UNIT_TESTS, checkout_env

NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT = 600  # s: notebook 01 trains a baseline in the kernel, then two 2-worker runs, on 2 loaded cores
# The core tests on Colab's Python 3.13, TensorFlow 2.20, IPython 7.34 and ipywidgets 7.7.1: the unit tests every
# Python runs, then TensorFlow's and Keras 3's output read and diagnosed (a real native fault among them), the
# dashboard's outputs (real runs, shown through IPython 7's display) and the magics in an IPython 7 shell.
# 733 tests in 49 s of pytest here (24 CPU-s).
CORE_TESTS = [*UNIT_TESTS, "tests/test_keras3_output.py", "tests/test_native_crash.py", "tests/test_diagnose.py",
              "tests/test_outputs.py", "tests/test_magics.py"]
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


REPOSITORY = "git+https://github.com/kwnb/kwnb@main"  # the install cell's, the badges' repository (README's Binder)
LESSONS = sorted(NOTEBOOKS.glob("0[0-7]*.ipynb"))
# Each lesson's kwnb extra: its processes' framework. Notebook 07's run Keras 3 on JAX, whose jax and keras Colab
# ships (constraints/colab.txt), the others TensorFlow.
EXTRAS = {"07_keras3_jax.ipynb": "jax"}


def install_cell(extra: str) -> str:
    """The Colab-only install cell, right under the title and its Open in Colab badge: the same in every lesson
    but for the extra (`kwnb[tf]`, notebook 07's `kwnb[jax]`); the one of the lessons with `extra`."""
    cells = {}
    for path in LESSONS:
        notebook = nbformat.read(path, as_version=4)
        title, install = notebook.cells[:2]
        assert f"(https://colab.research.google.com/github/kwnb/kwnb/blob/main/notebooks/{path.name})" in title.source
        own = EXTRAS.get(path.name, "tf")
        cells[path.name] = install.source.replace(f'"kwnb[{own}] @', '"kwnb[EXTRA] @')
    assert len(cells) == 9 and len(set(cells.values())) == 1, cells
    return next(iter(cells.values())).replace("[EXTRA]", f"[{extra}]")


@pytest.mark.parametrize("extra", ["tf", "jax"])
def test_the_lessons_install_cell_installs_kwnb_on_colab_only_replacing_nothing_colab_holds(extra, tmp_path):
    """The lessons' first code cell, run in a kernel of Colab's runtime (IPython 7.34 reads its %pip inside the
    `if`), this checkout in place of the repository and pip's plan (--dry-run) in place of the install: outside
    Colab it does nothing; on Colab (a google.colab module in this kernel only) pip would install kwnb, without
    the constraints as a learner's install goes, and nothing else that Colab pins (with the jax extra, notebook
    07's: not its jax, jaxlib or keras)."""
    source = install_cell(extra)
    assert REPOSITORY in source and "--quiet" in source and f'"kwnb[{extra}] @' in source
    plans = [tmp_path / "elsewhere.json", tmp_path / "colab.json"]
    planned = [source.replace(REPOSITORY, ROOT.as_uri()).replace("--quiet", f"--quiet --dry-run --report {plan}")
               for plan in plans]
    notebook = nbformat.v4.new_notebook(cells=[
        new_code_cell(planned[0]),
        new_code_cell("import sys, types\nsys.modules['google.colab'] = types.ModuleType('google.colab')"),
        new_code_cell(planned[1])])
    NotebookClient(notebook, timeout=CELL_TIMEOUT, km=kernel_of(colab_python(), tmp_path),
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=checkout_env())
    assert notebook.cells[0].outputs == [] and not plans[0].exists()
    assert plans[1].exists(), notebook.cells[2].outputs
    changed = {normalised(item["metadata"]["name"]): item["metadata"]["version"]
               for item in json.loads(plans[1].read_text())["install"]}
    assert changed == {"kwnb": "0.1.0"}


TWO_TASKS = """import json, os, sys
config = json.loads(os.environ["TF_CONFIG"])
print(f"task {config['task']['index']} of {len(config['cluster']['worker'])} on Python {sys.version_info[0]}.{sys.version_info[1]}")
"""


def test_on_python_313_kwnb_imports_whole_and_kwnb_run_runs_a_2_task_job(tmp_path):
    python = colab_python()
    imported = run_in(python, "-c", IMPORT_ALL, env=checkout_env(), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]
    count, where = imported.stdout.split()
    assert int(count) > 100 and where == str(ROOT / "kwnb" / "__init__.py")
    assert "--workers N" in run_in(python, "-m", "kwnb", "run", "--help", env=checkout_env()).stdout
    (tmp_path / "job.py").write_text(TWO_TASKS)
    run = run_in(python, "-m", "kwnb", "run", "job.py", "-n", "2", cwd=tmp_path,
                 env=checkout_env(KWNB_WARM="0", KWNB_RUNS_DIR=str(tmp_path / "runs")))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[worker 0] task 0 of 2 on Python 3.13" in run.stdout and "[worker 1] task 1 of 2 on Python 3.13" in run.stdout
    assert "kwnb run 'job': finished" in run.stdout and "exit codes: 0, 0" in run.stdout


def test_on_python_313_the_core_tests_pass():
    python = colab_python()
    if run_in(python, "-c", "import pytest").returncode != 0:
        pytest.skip(f"{python.parent.parent.name} has no pytest: `make colab-env` installs it (rebuild it)")
    tested = run_in(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *CORE_TESTS, cwd=ROOT,
                    env=checkout_env(), timeout=900)
    assert tested.returncode == 0, tested.stdout[-5000:] + tested.stderr[-3000:]
    assert re.search(r"\b\d{3,} passed\b", tested.stdout.splitlines()[-1]), tested.stdout[-3000:]


@pytest.mark.slow
# 07: Keras 3 on Colab's jax 0.7.2 and keras 3.13.2 (kwnb's own tests run jax 0.10)
@pytest.mark.parametrize("name", ["00_hello_cluster.ipynb", "01_multi_worker_keras.ipynb", "07_keras3_jax.ipynb"])
def test_the_first_notebooks_run_in_a_colab_kernel_with_their_dashboards(name, tmp_path):
    colab_python()
    shutil.copy(NOTEBOOKS / name, tmp_path)
    notebook = nbformat.read(tmp_path / name, as_version=4)
    notebook.cells.insert(0, new_code_cell(VERSIONS))
    env = checkout_env(KWNB_OFFLINE="1")  # the shipped MNIST sample: no download in a test
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
