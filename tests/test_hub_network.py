"""A shared machine (issue 30): slirp4netns and pasta checked for real (their TUN device, their start)."""
from __future__ import annotations

import os
import shutil

import pytest

import kwnb
from kwnb.backends import netns


@pytest.fixture(autouse=True)
def fresh_support():
    netns.support.cache_clear()
    yield
    netns.support.cache_clear()


def private_possible() -> netns.Support:
    found = netns.support()
    if not found.possible:
        pytest.skip(f"no private network here: {found.forbidden_by}")
    return found


def test_a_tool_whose_tun_device_cannot_be_opened_is_not_chosen(tmp_path, monkeypatch):
    if not any(shutil.which(tool) for tool in netns.TOOLS):
        pytest.skip("neither slirp4netns nor pasta is installed")
    monkeypatch.setattr(netns, "TUN_DEVICE", str(tmp_path / "absent-tun"))  # as in a container without it
    found = netns.support()
    assert found.tool == "" and not found.complete
    assert "is installed, but this user cannot open" in found.unusable and "absent-tun" in found.unusable


BROKEN_TOOL = "#!/bin/sh\nprintf 'open(\"/dev/net/tun\"): Permission denied\\nchild failed(1)\\n' >&2\nexit 1\n"


def test_a_tool_that_fails_at_start_leaves_the_run_private_without_outside_access(tmp_path, monkeypatch):
    """The issue's slirp4netns, as it failed: the run goes on in its namespace, said once, no bytes repr."""
    private_possible()
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "slirp4netns"
    tool.write_text(BROKEN_TOOL)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(netns.USERNET_ENV, "slirp4netns")
    assert netns.support().complete  # the probe cannot know: the device itself opens
    (tmp_path / "hello.py").write_text("print('hello from inside')\n")
    run = kwnb.launch(tmp_path / "hello.py", n=2, cwd=tmp_path, runs_dir=tmp_path / "runs", timeout=60)
    assert run.wait(60) == [0, 0], run.summary()
    assert run.launcher.chosen == "private"
    said = [note for note in run.notes if "slirp4netns" in note]
    assert said == ['slirp4netns could not connect the private network: open("/dev/net/tun"): Permission denied; '
                    "child failed(1); the run went on in a private network without outside access"], run.notes
