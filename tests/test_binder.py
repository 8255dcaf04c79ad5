"""The Binder configuration, checked offline: what repo2docker would build, and that pip resolves it.

repo2docker --no-build only writes the Dockerfile it would build (no Docker engine needed). It runs
on a clean `git clone` of this repository's HEAD, so nothing untracked (.venv, .kwnb, build/) can
make it pass; the working tree's binder/ folder is laid over the clone, so uncommitted edits to
binder/ are what gets checked.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("repo2docker", reason="jupyter-repo2docker is not installed (pip install -e '.[test]')")

REPO = Path(__file__).resolve().parents[1]
BINDER = REPO / "binder"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot make a clean clone")
    if not (REPO / ".git").exists():
        pytest.skip(f"{REPO} is not a git repository")
    target = tmp_path_factory.mktemp("binder") / "kwnb"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(target)], check=True, capture_output=True, timeout=120)
    shutil.rmtree(target / "binder", ignore_errors=True)
    shutil.copytree(BINDER, target / "binder")
    return target


@pytest.fixture(scope="module")
def dockerfile(clone) -> str:
    result = subprocess.run([sys.executable, "-m", "repo2docker", "--no-build", "--debug", str(clone)],
                            cwd=clone.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def requirement_lines() -> list[str]:
    text = (BINDER / "requirements.txt").read_text()
    return [line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip()]


def test_binder_files_are_the_ones_repo2docker_reads():
    assert (BINDER / "requirements.txt").is_file() and (BINDER / "runtime.txt").is_file()
    assert (BINDER / "runtime.txt").read_text().strip() == "python-3.11"
    postbuild = BINDER / "postBuild"
    if postbuild.exists():
        assert postbuild.stat().st_mode & stat.S_IXUSR, "binder/postBuild must be executable"
    # Only files repo2docker knows: a stray environment.yml would silently win over requirements.txt.
    known = {"requirements.txt", "runtime.txt", "postBuild", "apt.txt", "start"}
    assert {p.name for p in BINDER.iterdir()} <= known


def test_requirements_are_cpu_tensorflow_tf_keras_and_this_package():
    lines = requirement_lines()
    assert any(re.fullmatch(r"tensorflow\s*==\s*2\.21\.\*", line) for line in lines), lines
    assert any(re.fullmatch(r"tf-keras\s*==\s*2\.21\.\*", line) for line in lines), lines
    assert not any(line.startswith(("tensorflow-cpu", "tensorflow[and-cuda]")) for line in lines)
    # pip runs from the repository root, so "." (editable or not) is kwnb itself.
    assert "-e ." in lines or "." in lines


def test_repo2docker_plans_python_3_11_and_installs_the_requirements_from_the_repo_root(dockerfile):
    assert "Building conda environment for python=3.11" in dockerfile
    workdir = dockerfile.index("WORKDIR ${REPO_DIR}")
    copy_repo = dockerfile.index("COPY --chown=0:0 src/ ${REPO_DIR}/")
    install = dockerfile.index('pip install --no-cache-dir -r "binder/requirements.txt"')
    # A local requirement ("-e .") must be installed after the whole repository is in place.
    assert workdir < copy_repo < install, "requirements.txt is installed before the repository is copied"
    if (BINDER / "postBuild").exists():
        assert "postBuild" in dockerfile
    if (BINDER / "start").exists():
        assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def test_start_script_sets_offline_data_and_hands_over(clone):
    start = clone / "binder" / "start"
    if not start.exists():
        pytest.skip("no binder/start")
    assert start.stat().st_mode & stat.S_IXUSR, "binder/start must be executable"
    assert start.read_text().rstrip().endswith('exec "$@"'), "binder/start must end by running its arguments"
    env = {k: v for k, v in os.environ.items() if k != "KWNB_OFFLINE"}
    result = subprocess.run([str(start), sys.executable, "-c", "import os; print(os.environ['KWNB_OFFLINE'])"],
                            capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr


def test_start_script_points_tensorboard_at_the_hub_proxy(clone):
    """%kw_tensorboard's frame goes through jupyter-server-proxy behind JupyterHub (Binder)."""
    start = clone / "binder" / "start"
    env = {k: v for k, v in os.environ.items() if k != "TENSORBOARD_PROXY_URL"}
    env["JUPYTERHUB_SERVICE_PREFIX"] = "/user/someone/"
    result = subprocess.run([str(start), sys.executable, "-c", "import os; print(os.environ['TENSORBOARD_PROXY_URL'])"],
                            capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "/user/someone/proxy/%PORT%/", result.stderr


def test_pip_resolves_the_requirements(clone, tmp_path):
    report = tmp_path / "report.json"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
         "--report", str(report), "-r", "binder/requirements.txt"],
        cwd=clone, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    resolved = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    assert resolved["kwnb"] and resolved["tensorflow"].startswith("2.21.") and resolved["tf-keras"].startswith("2.21.")
    assert resolved["ipywidgets"].startswith("8.")
    assert "tensorflow-cpu" not in resolved
    assert resolved["tensorboard"].startswith("2.21.") and resolved["jupyter-server-proxy"]
