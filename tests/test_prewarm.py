"""A warm first cell (kwnb/backends/prewarm.py): loading the extension fills the pool for a default
`-n 2` run, so the first run of a session starts warm, with the same tasks as a cold start."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import kwnb
from waiting import pool_ready
from kwnb.backends.warm import POOL
from kwnb.backends.prewarm import prewarm

SCRIPT = Path(__file__).parent / "scripts" / "warm_probe.py"


@pytest.fixture
def warm_session(monkeypatch, eager_pool):
    monkeypatch.setenv("KWNB_WARM", "1")  # as in a user's kernel (tests/conftest.py turns it off)
    yield  # the pool emptied, refilling at once at the kernel's priority: what, not when (tests/conftest.py)


def test_kwnb_warm_0_starts_nothing(monkeypatch):
    monkeypatch.setenv("KWNB_WARM", "0")
    assert prewarm(2) is None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_first_run_after_loading_the_extension_starts_warm(tmp_path, warm_session):
    prewarm(2).join(30)
    assert pool_ready(2), (POOL.status(), POOL.refused)
    assert "memory for" in POOL.cap_reason and "2 per CPU, at least 2" in POOL.cap_reason  # both grounds named
    assert [w["imports"] for w in POOL.status()] == [("tensorflow", "tf_keras")] * 2  # no script yet: the tutorials'
    run = kwnb.launch(SCRIPT, n=2, runs_dir=tmp_path / "runs", cwd=tmp_path)  # every option its default
    assert run.wait(150) == [0, 0], run.summary()
    assert run.warm and "started warm: 2 of 2" in run.summary()
    seen = [json.loads(next(line for line in run.logs(i).splitlines() if line.startswith("SEEN "))[5:]) for i in (0, 1)]
    assert all(s["tf_already"] and s["nice"] == 0 for s in seen)
