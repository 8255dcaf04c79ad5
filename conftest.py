"""Session-wide setup for tests/ and notebooks/: private Slurm clusters (tests/slurm_support.py).

Two kinds, each started once, by the first test that needs it: the one-node
cluster (the `slurm` fixture or marker), whose SLURM_CONF the session exports, and the 2-node one,
each node a network namespace of its own (the `slurm_nodes` fixture). A notebook that mentions Slurm
gets the 2-node cluster where namespaces can be made, else the one-node one: its SLURM_CONF is set
while nbval starts the notebook's kernel, which inherits it. Both stop when the session ends.
KWNB_TEST_SLURM=0 switches them off (those tests skip); KWNB_TEST_SLURM=1 starts both even if no test asks.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest


def _load(name: str):
    """Import tests/NAME.py as `NAME`, the module tests import, so both share one module (and one cluster)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


for _needed in ("slurm_netns", "slurm_cluster", "slurm_start"):  # what slurm_support imports, in order
    _load(_needed)
slurm_support = _load("slurm_support")
NOTEBOOK_MENTIONS_SLURM = re.compile(r"slurm|sbatch|srun|sinfo|squeue", re.I)


def _needs_slurm(item: pytest.Item) -> str | None:
    """Which cluster the item uses: "one", "nodes", "notebook" (nodes where possible, else one) or None."""
    fixtures = getattr(item, "fixturenames", ())
    if "slurm_nodes" in fixtures:
        return "nodes"
    if "slurm" in fixtures or item.get_closest_marker("slurm"):
        return "one"
    path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
    return "notebook" if path.suffix == ".ipynb" and _mentions_slurm(path) else None


_notebook_cache: dict[Path, bool] = {}


def _mentions_slurm(path: Path) -> bool:
    if path not in _notebook_cache:
        try:
            _notebook_cache[path] = bool(NOTEBOOK_MENTIONS_SLURM.search(path.read_text(errors="replace")))
        except OSError:
            _notebook_cache[path] = False
    return _notebook_cache[path]


def pytest_collection_finish(session: pytest.Session) -> None:
    if not session.config.option.collectonly and slurm_support.forced():
        slurm_support.ensure_nodes_started()
        slurm_support.ensure_started()


# Under pytest-xdist (`make test` runs `-n 3 --dist loadfile --no-loadscope-reorder`), each file is run by one worker
# in its order (a notebook's cells share a kernel; a module's fixtures are made once; only tests/test_ray.py uses the
# Ray cluster). Files are handed out in the order below, the longest first, so that none starts last alone; the
# others follow in their usual order.
# Seconds each took in the clean run of 2026-11-28 with three workers (pytest 1077 s): docs/testing.md.
LONGEST_FIRST = (
    # The Ray cluster's raylets must register within Ray's fixed 30 s: beside the corpus's four runs at a time they
    # missed it four times of four once, so it starts beside notebook 06 and the corpus (one run at a time each).
    "tests/test_ray.py",  # 209: the 3-node cluster's start, then 2-worker jobs across its nodes
    "notebooks/06_break_it.ipynb",  # 77: one real run per mistake
    "tests/test_corpus.py",  # 427: every entry a real run, one at a time
    "tests/test_colab_env.py",  # 201: Python 3.13's core tests, notebooks in Colab's kernel
    "tests/test_jax.py",  # 198
    "tests/test_jupyterlab_ui.py",  # 135: a browser session per kernel, ipykernel 7 and 6.17
    "tests/test_diagnose.py",  # 117
    "tests/test_warm.py",  # 117
    "tests/test_hub_workshop.py",  # 90
    "tests/test_benchmarks_smoke.py",  # 73
    "tests/test_slurm.py",  # 65
    "tests/test_notebook7_ui.py",  # 63
    "notebooks/07_keras3_jax.ipynb",  # 61
    "tests/test_pythons.py",  # 60
    "tests/test_training_faults.py",  # 58
    "tests/test_slurm_nodes.py",  # 57
    "tests/test_warm_cgroup.py",  # 51
    "notebooks/02_custom_training_loop.ipynb",  # 50
    "tests/test_roles.py",  # 46
    "tests/test_notebooks_quiet.py",  # 46
    "tests/test_notebook6_ui.py",  # 40
)


def _file(item: pytest.Item) -> str:
    path = Path(str(getattr(item, "path", getattr(item, "fspath", "")))).resolve()
    try:
        return path.relative_to(Path(__file__).parent).as_posix()
    except ValueError:
        return path.as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # set in each worker, which collects and sends the items
        return
    files = {item: _file(item) for item in items}
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    first_seen = {name: position for position, name in reversed(list(enumerate(files.values())))}
    items.sort(key=lambda item: (rank.get(files[item], len(rank)), first_seen[files[item]]))


_kernel_conf: list[str | None] = []  # SLURM_CONF as it was before a notebook item's setup changed it


@pytest.hookimpl(tryfirst=True)  # before nbval's setup starts the notebook's kernel
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each cluster is started by the first item that needs it (under pytest-xdist, in the one worker that runs it)."""
    needs = _needs_slurm(item)
    if needs == "notebook":
        cluster = slurm_support.ensure_nodes_started() or slurm_support.ensure_started()
        if cluster is not None:
            _kernel_conf.append(os.environ.get("SLURM_CONF"))
            os.environ["SLURM_CONF"] = str(cluster.conf)
    elif needs == "nodes" and slurm_support.ensure_nodes_started() is None:
        pytest.skip(slurm_support.nodes_skip_reason() or "no multi-node test Slurm in this session")
    elif item.get_closest_marker("slurm") and needs != "nodes" and slurm_support.ensure_started() is None:
        pytest.skip(slurm_support.skip_reason() or "no test Slurm in this session")


def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _kernel_conf:
        previous = _kernel_conf.pop()
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    slurm_support.shutdown()


atexit.register(slurm_support.shutdown)  # should pytest leave without finishing the session


def pytest_terminal_summary(terminalreporter) -> None:
    if slurm_support.summary:
        terminalreporter.write_line(f"test Slurm: {slurm_support.summary}")
    if slurm_support.nodes_summary:
        terminalreporter.write_line(f"test Slurm, {slurm_support.NODES} nodes: {slurm_support.nodes_summary}")


@pytest.fixture(scope="session")
def slurm():
    """The session's private Slurm (slurm_support.SlurmCluster: .conf, .partition, .node, .cpus, .run()),
    or a skip saying why there is none."""
    cluster = slurm_support.ensure_started()
    if cluster is None:
        pytest.skip(slurm_support.skip_reason())
    return cluster


@pytest.fixture(scope="session")
def slurm_nodes():
    """The session's multi-node Slurm (slurm_support.SlurmCluster with .nodes, .network, .address(node),
    .in_node(node, ...)), each node a network host of its own; or a skip saying why there is none."""
    cluster = slurm_support.ensure_nodes_started()
    if cluster is None:
        pytest.skip(slurm_support.nodes_skip_reason())
    return cluster
