"""The way other users are given into a clone in a folder only its owner can enter (tests/readable_copy.py), as the
JupyterHub tests use it: every needed entry of a closed folder reachable at once, not only the first."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import readable_copy

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"),
                                reason="needs root, unshare and setpriv to act as another user in a namespace")


def _as_nobody(steps: str, check: str) -> subprocess.CompletedProcess:
    """`check` run as user 65534 after `steps` (as root) in a mount namespace of its own."""
    inner = f"{steps} && " if steps else ""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"{inner}setpriv --reuid 65534 --regid 65534 --clear-groups sh -c '{check}'"],
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def open_folder():
    """A folder every user can enter (pytest's tmp_path is under a mode-700 folder of its own)."""
    base = readable_copy.shared_base()
    if base is None:
        pytest.skip(f"no temporary folder every user can enter ({', '.join(readable_copy.CANDIDATES)})")
    folder = Path(tempfile.mkdtemp(prefix="kwnb-closed-", dir=base))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_every_entry_of_a_closed_clone_is_reached(open_folder):
    tmp_path = open_folder
    clone = tmp_path / "clone"
    (clone / ".venv" / "bin").mkdir(parents=True)
    (clone / "kwnb").mkdir()
    (clone / "tests").mkdir()
    (clone / "secret").mkdir()
    (clone / "tests" / "hub_config.py").write_text("ok\n")
    (clone / "kwnb" / "__init__.py").write_text("ok\n")
    for folder in (tmp_path, clone / ".venv", clone / ".venv" / "bin", clone / "kwnb", clone / "tests"):
        os.chmod(folder, 0o755)
    os.chmod(clone, 0o700)
    check = f"cat {clone}/tests/hub_config.py {clone}/kwnb/__init__.py && ls {clone}/.venv/bin"
    if _as_nobody("", check).returncode == 0:
        pytest.skip(f"user 65534 can already enter {clone}: nothing to open")
    needed = [clone / ".venv", clone / "kwnb", clone / "tests"]
    assert readable_copy.closed_folders(needed) == {clone: {".venv", "kwnb", "tests"}}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    reached = _as_nobody(readable_copy.reach_steps(needed, scratch), check)
    assert reached.returncode == 0, reached.stderr
    assert reached.stdout.split() == ["ok", "ok"]
    seen = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"{readable_copy.reach_steps(needed, scratch)} && ls -A {clone}"],
                          capture_output=True, text=True, timeout=30)
    assert seen.stdout.split() == [".venv", "kwnb", "tests"]  # what was not asked for stays out of sight
