"""The wheel: `pip wheel .` builds it without warnings, and it holds what an installed kwnb needs.

The build runs on a copy of the files git would put in a fresh clone (tracked, plus untracked ones that
are not ignored), so a stale `build/` folder cannot add modules that moved away, and the shared work tree
gets no `build/` of ours. The expected contents are globbed from the source tree, not listed by name,
so the test follows modules as they move. Build isolation is on, as for any `pip install`: pip fetches
the build-system requirements (setuptools>=77) into a throwaway environment.
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest

# The build took 3 s on a quiet 2-core machine, 8 to 12 s on a busy one (pip sets up an isolated environment).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# Backend warnings as pip forwards them (SetuptoolsDeprecationWarning, BuildBackendWarning, ...),
# distutils-style "warning: ..." lines, deprecation prose, and pip's own DEPRECATION notices.
# pip's upper-case "WARNING:" lines are left out: here they are about this machine's index config.
WARNING_LINE = re.compile(r"\w+Warning\b|is deprecated|^\s*warning:|DEPRECATION:")
# What pip prints when it cannot get setuptools for the isolated build: no network, no index.
NO_BUILD_DEPS = ("Could not find a version that satisfies the requirement setuptools",
                 "Failed to establish a new connection", "No matching distribution found for setuptools")


def source_files() -> list[str]:
    """Relative paths of the files a fresh clone (plus uncommitted work) holds."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout: the build runs on the files a fresh clone would hold")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True, timeout=60).stdout.decode()
    # The index can still list a file that was just moved away in the work tree.
    return sorted(p for p in set(listed.split("\0")) if p and (REPO / p).is_file())


class Build(NamedTuple):
    files: list[str]  # what was copied and built, relative to the repository
    log: str  # pip's verbose output
    wheel: Path


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Build:
    """A build of a clean copy of the tree."""
    files = source_files()
    src = tmp_path_factory.mktemp("src")
    for rel in files:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    out = tmp_path_factory.mktemp("wheel")
    # -v: the backend's own output, whether or not this pip forwards its warnings by default.
    # PYTHONDONTWRITEBYTECODE makes distutils warn "byte-compiling is disabled" about nothing of ours.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-v", "-w", str(out)],
                            capture_output=True, text=True, env=env, timeout=240)
    log = result.stdout + result.stderr
    if result.returncode != 0 and any(s in log for s in NO_BUILD_DEPS):
        pytest.skip("pip could not fetch the build requirements (setuptools>=77) for an isolated build")
    assert result.returncode == 0, log
    wheels = list(out.glob("kwnb-*.whl"))
    assert len(wheels) == 1, (wheels, log)
    return Build(files, log, wheels[0])


@pytest.fixture(scope="module")
def names(build) -> set[str]:
    with zipfile.ZipFile(build.wheel) as wheel:
        return set(wheel.namelist())


def dist_info(build: Build, names: set[str], name: str) -> str:
    """The text of `name` in the wheel's .dist-info folder."""
    paths = [n for n in names if re.fullmatch(r"kwnb-[^/]+\.dist-info/" + name, n)]
    assert len(paths) == 1, f"{name} is not in the wheel's .dist-info: {sorted(names)}"
    with zipfile.ZipFile(build.wheel) as wheel:
        return wheel.read(paths[0]).decode()


def test_the_wheel_builds_without_warnings(build):
    warnings = [line.strip() for line in build.log.splitlines() if WARNING_LINE.search(line)]
    assert not warnings, "\n".join(warnings)


def test_the_wheel_holds_every_module_and_the_mnist_sample(build, names):
    sources = [p for p in build.files if p.startswith("kwnb/")]
    modules = [p for p in sources if p.endswith(".py")]
    sample = [p for p in sources if re.fullmatch(r"kwnb/datasets/data/[^/]+\.npz", p)]
    assert "kwnb/__init__.py" in modules and sample, (modules, sample)
    expected = set(modules) | set(sample) | {"kwnb/datasets/data/README.md"}
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"
    # Only kwnb itself: no tests/, benchmarks/ or bytecode slipping in.
    stray = sorted(n for n in names if not n.startswith(("kwnb/", "kwnb-")) or n.endswith(".pyc"))
    assert not stray, stray


def test_the_wheel_carries_the_spdx_license_and_its_text(build, names):
    metadata = dist_info(build, names, "METADATA")
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    license_text = dist_info(build, names, "licenses/LICENSE")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text


def test_the_console_script_runs_from_the_installed_wheel(build, names, tmp_path):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(dist_info(build, names, "entry_points.txt"))
    module = entry_points["console_scripts"]["kwnb"].split(":")[0]
    path = module.replace(".", "/")
    assert {path + ".py", path + "/__init__.py"} & names, f"the entry point's module {module} is not in the wheel"
    # Installed into a plain folder (no network: --no-deps --no-index); the venv supplies the dependencies.
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                    str(build.wheel)], check=True, capture_output=True, timeout=120)
    env = {**os.environ, "PYTHONPATH": str(target)}
    # The venv's editable kwnb and the work tree (cwd) must not be what runs: PYTHONPATH comes before the
    # editable finder, and cwd is a folder without kwnb. Checked, as that is what makes this test mean anything.
    where = subprocess.run([sys.executable, "-c", "import kwnb; print(kwnb.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(target), where.stdout
    result = subprocess.run([str(target / "bin" / "kwnb"), "--help"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("usage: kwnb"), result.stdout + result.stderr


def test_the_suites_jsonschema_imports_no_earley_parser():
    """The test extra's `jsonschema[format]` brings rfc3987, so jsonschema skips rfc3987-syntax, whose import builds
    an Earley parser (2.4 CPU-s) in every Ray worker and daemon, Jupyter server and nbformat user the suite starts."""
    imported = subprocess.run([sys.executable, "-c", "import sys, jsonschema; print('rfc3987_syntax' in sys.modules)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert imported == "False"
