"""kwnb on Python 3.10 and 3.12, the host versions neither the main venv (3.11) nor .venv-colab (3.13) has, in the
venvs `make pythons` builds (.venv-py310, .venv-py312: kwnb editable from this checkout, its base dependencies and
pytest, no TensorFlow). There pip accepts `kwnb[tf]`, every module imports, `kwnb run` runs a 2-task job of plain
Python to its end with the reported curves kept, and the unit tests that need no TensorFlow pass. Skipped, saying
why, where the machine has no such Python or the venv is not built."""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import kwnb
from colab_support import run_in
from interpreter_support import IMPORT_ALL, ROOT, UNIT_TESTS, checkout_env, python_of

SCRIPTS = Path(__file__).parent / "scripts"
VERSIONS = ["3.10", "3.12"]


def test_the_package_names_the_pythons_tested():
    """pyproject.toml's classifiers: this file's two, Binder's 3.11 (binder/runtime.txt, the main venv's here) and
    Colab's 3.13 (tests/test_colab_env.py), and the suite's own Python among them."""
    text = (ROOT / "pyproject.toml").read_text()
    named = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', text)
    binder = (ROOT / "binder" / "runtime.txt").read_text().strip().removeprefix("python-")
    assert sorted(named) == sorted({*VERSIONS, binder, "3.13"})
    assert "%d.%d" % sys.version_info[:2] in named
    assert re.findall(r'^requires-python = "(.*)"$', text, re.M) == [">=3.10"]


@pytest.fixture(params=VERSIONS)
def python(request) -> Path:
    """The venv's interpreter for that Python; skips the test, saying why, where there is none."""
    version = request.param
    venv = ROOT / f".venv-py{version.replace('.', '')}"
    if not (venv / ".kwnb-installed").exists():
        pytest.skip(f"no python{version} on this machine (PATH or pyenv)" if python_of(version) is None else
                    f"{venv.name} is not built: `make pythons` builds it")
    interpreter = venv / "bin" / "python"
    shown = run_in(interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").stdout.strip()
    assert shown == version
    return interpreter


def tf_extra() -> dict[str, Requirement]:
    """pyproject.toml's `tf` extra, by name."""
    line = re.search(r"^tf = (\[.*\])$", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    return {requirement.name: requirement for requirement in map(Requirement, json.loads(line))}


def test_pip_accepts_kwnb_tf_on_that_python(python, tmp_path, record_property):
    """pip's plan for `pip install kwnb[tf]` in the venv, where kwnb is installed from this checkout (its --dry-run
    report, against the index this machine's pip uses, as tests/test_binder.py resolves Binder's): a TensorFlow the
    tf extra accepts, with the tf-keras and TensorBoard of its minor version, and kwnb itself kept."""
    extra = tf_extra()
    assert set(extra) == {"tensorflow", "tf-keras", "tensorboard"}
    metadata = run_in(python, "-c", "from importlib.metadata import requires; print('\\n'.join(requires('kwnb')))")
    installed = [Requirement(line) for line in metadata.stdout.splitlines()]
    assert {(r.name, r.specifier) for r in installed if r.marker and r.marker.evaluate({"extra": "tf"})} == \
           {(r.name, r.specifier) for r in extra.values()}  # the venv's kwnb is this checkout's pyproject.toml
    report = tmp_path / "report.json"
    env = checkout_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    del env["PYTHONPATH"]  # the venv's own kwnb, not the checkout's folder (which holds a kwnb.egg-info)
    plan = run_in(python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), "kwnb[tf]",
                  cwd=tmp_path, env=env, timeout=600)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    planned = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
               for item in json.loads(report.read_text())["install"]}
    tensorflow = planned["tensorflow"]
    record_property("tensorflow", tensorflow)
    print(f"pip on {python} would install tensorflow {tensorflow}")
    minor = ".".join(tensorflow.split(".")[:2]) + "."
    assert extra["tensorflow"].specifier.contains(tensorflow), planned
    assert planned["tf-keras"].startswith(minor) and extra["tf-keras"].specifier.contains(planned["tf-keras"]), planned
    assert planned["tensorboard"].startswith(minor), planned
    assert "kwnb" not in planned and "tensorflow-cpu" not in planned


def test_every_module_imports_without_tensorflow(python, tmp_path):
    assert run_in(python, "-c", "import importlib.util as u; print(u.find_spec('tensorflow'))").stdout.strip() == "None"
    imported = run_in(python, "-c", IMPORT_ALL, env=checkout_env(), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr[-3000:]
    count, where = imported.stdout.split()
    assert int(count) > 100 and where == str(ROOT / "kwnb" / "__init__.py")


def test_kwnb_run_runs_a_2_task_job_and_keeps_its_curves(python, tmp_path):
    """tests/scripts/reporter.py, plain Python that reports epochs and steps with kwnb.report(), through the CLI of
    that Python; the run folder is then opened here, by the suite's own Python."""
    out = tmp_path / "out"
    out.mkdir()
    script = Path(shutil.copy(SCRIPTS / "reporter.py", tmp_path))
    runs = tmp_path / "runs"
    run = run_in(python, "-m", "kwnb", "run", script.name, "-n", "2", "--", str(out), cwd=tmp_path,
                 env=checkout_env(KWNB_WARM="0", KWNB_RUNS_DIR=str(runs)))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "kwnb run 'reporter': finished" in run.stdout and "exit codes: 0, 0" in run.stdout, run.stdout[-3000:]
    past = kwnb.open_run("reporter", runs_dir=runs)
    assert past.exit_codes == [0, 0] and past.missing == [], past.summary()
    for position in (0, 1):
        expected = json.loads((out / f"expected-{position}.json").read_text())
        assert without_time(past.history(position)) == expected["epochs"]
        assert without_time(past.step_history(position)) == expected["steps"]
    assert past.curves_path is not None and past.curves_path.is_file()
    assert json.loads((past.dir / "run.json").read_text())["python"] == str(python)


def without_time(rows: list[dict]) -> list[dict]:
    return [{key: value for key, value in row.items() if key != "time"} for row in rows]


def test_the_unit_tests_that_need_no_tensorflow_pass(python):
    tested = run_in(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *UNIT_TESTS,
                    cwd=ROOT, env=checkout_env(), timeout=600)
    assert tested.returncode == 0, tested.stdout[-5000:] + tested.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", tested.stdout.splitlines()[-1]), tested.stdout[-3000:]
