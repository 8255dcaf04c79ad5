"""Session-wide setup for tests/ and notebooks/: a private one-node Slurm (tests/slurm_support.py).

It is started once, after collection and only if a collected test needs it (the `slurm` fixture or
marker, or a notebook that mentions Slurm), and before nbval starts any notebook kernel: kernels
inherit SLURM_CONF from this process. It is stopped when the session ends.
KWNB_TEST_SLURM=0 switches it off (those tests skip); KWNB_TEST_SLURM=1 starts it even if no test asks.
"""
from __future__ import annotations

import atexit
import importlib.util
import re
import sys
from pathlib import Path

import pytest


def _load_slurm_support():
    """Import tests/slurm_support.py as `slurm_support`, the module tests import, so both share one cluster."""
    if "slurm_support" in sys.modules:
        return sys.modules["slurm_support"]
    spec = importlib.util.spec_from_file_location("slurm_support", Path(__file__).parent / "tests" / "slurm_support.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["slurm_support"] = module
    spec.loader.exec_module(module)
    return module


slurm_support = _load_slurm_support()
NOTEBOOK_MENTIONS_SLURM = re.compile(r"slurm|sbatch|srun|sinfo|squeue", re.I)


def _needs_slurm(item: pytest.Item) -> bool:
    if "slurm" in getattr(item, "fixturenames", ()) or item.get_closest_marker("slurm"):
        return True
    path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
    return path.suffix == ".ipynb" and _mentions_slurm(path)


_notebook_cache: dict[Path, bool] = {}


def _mentions_slurm(path: Path) -> bool:
    if path not in _notebook_cache:
        try:
            _notebook_cache[path] = bool(NOTEBOOK_MENTIONS_SLURM.search(path.read_text(errors="replace")))
        except OSError:
            _notebook_cache[path] = False
    return _notebook_cache[path]


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if slurm_support.forced() or any(_needs_slurm(item) for item in session.items):
        slurm_support.ensure_started()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slurm") and slurm_support.current() is None:
        pytest.skip(slurm_support.skip_reason() or "no test Slurm in this session")


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    slurm_support.shutdown()


atexit.register(slurm_support.shutdown)  # should pytest leave without finishing the session


def pytest_terminal_summary(terminalreporter) -> None:
    if slurm_support.summary:
        terminalreporter.write_line(f"test Slurm: {slurm_support.summary}")


@pytest.fixture(scope="session")
def slurm():
    """The session's private Slurm (slurm_support.SlurmCluster: .conf, .partition, .node, .cpus, .run()),
    or a skip saying why there is none."""
    cluster = slurm_support.ensure_started()
    if cluster is None:
        pytest.skip(slurm_support.skip_reason())
    return cluster
