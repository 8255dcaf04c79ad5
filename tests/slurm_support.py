"""The test suite's private Slurm clusters, one of each kind per pytest session, started on demand.

conftest.py drives this: `ensure_started()` (the one-node cluster, whose SLURM_CONF the session
exports) and `ensure_nodes_started()` (the 2-node one) once per session, before nbval starts notebook
kernels, which inherit SLURM_CONF; `shutdown()` at the end; `skip_reason()` and `nodes_skip_reason()`.
Starting one is tests/slurm_start.py's; a running one is tests/slurm_cluster.py's SlurmCluster (both
names, and `start`, are importable from here too).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from slurm_cluster import SlurmCluster, SlurmUnavailable
from slurm_start import check_prerequisites, start

__all__ = ["SlurmCluster", "SlurmUnavailable", "check_prerequisites", "start", "ensure_started",
           "ensure_nodes_started", "current", "nodes_current", "skip_reason", "nodes_skip_reason", "shutdown"]

OPT_OUT_ENV = "KWNB_TEST_SLURM"  # "0": never start Slurm; "1": start it even if no collected test asks
REASON_ENV = "KWNB_TEST_SLURM_SKIP"  # set for notebooks (which cannot pytest.skip) when there is no Slurm
NODES = 2  # the multi-node cluster's size: enough for one task per node and for 2 + 1 tasks

summary: str | None = None  # one line for the end of the pytest report: what ran, or why nothing did
nodes_summary: str | None = None  # the same for the multi-node cluster
_saved_env: dict[str, str | None] = {}


@dataclass
class _Slot:
    """The session's cluster of one kind: started at most once, or the reason there is none."""

    hosts: int
    cluster: SlurmCluster | None = None
    reason: str | None = "Slurm was not started in this session (no collected test asked for it)"
    attempted: bool = False

    def ensure(self) -> SlurmCluster | None:
        if self.attempted:
            return self.cluster
        self.attempted = True
        if opted_out():
            self.reason = f"{OPT_OUT_ENV}=0: the test Slurm was switched off"
            return None
        try:
            self.cluster = start(hosts=self.hosts)
        except SlurmUnavailable as error:
            self.reason = str(error)
        except (OSError, subprocess.SubprocessError) as error:
            self.reason = f"the test Slurm could not be started: {type(error).__name__}: {error}"
        else:
            self.reason = None
        return self.cluster

    def summary(self) -> str:
        cluster = self.cluster
        if cluster is None:
            return f"not available: {self.reason}"
        if cluster.network:
            where = (f"nodes {', '.join(f'{node} ({cluster.address(node)})' for node in cluster.nodes)}, "
                     f"{cluster.cpus} CPUs each, slurmctld at {cluster.network.address(cluster.network.ctld)}")
        else:
            where = f"node {cluster.node} ({cluster.cpus} CPUs)"
        return (f"{cluster.version}: {where}, partition {cluster.partition}, idle in {cluster.idle_seconds:.1f} s, "
                f"ready in {cluster.started_seconds:.1f} s, SLURM_CONF={cluster.conf}")

    def stop(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            self.reason = "the test Slurm was stopped at the end of the session"
            cluster.stop()


_one, _multi = _Slot(hosts=0), _Slot(hosts=NODES)


def _setting() -> str:
    return os.environ.get(OPT_OUT_ENV, "").strip().lower()


def opted_out() -> bool:
    return _setting() in ("0", "no", "false", "off")


def forced() -> bool:
    return _setting() in ("1", "yes", "true", "on")


def _set_env(name: str, value: str | None) -> None:
    """Set (or unset) a variable for this process and the kernels it starts; shutdown() puts it back."""
    _saved_env.setdefault(name, os.environ.get(name))
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def ensure_started() -> SlurmCluster | None:
    """Start the session's one-node cluster once and export SLURM_CONF; on failure remember why (and export that).

    A SLURM_CONF already in the environment (a developer's own Slurm) is overridden for the session:
    the tests assume an idle node and a partition of their own, which a shared cluster cannot promise.
    """
    global summary
    if not _one.attempted:
        cluster = _one.ensure()
        summary = _one.summary()
        if cluster is not None:
            _set_env("SLURM_CONF", str(cluster.conf))
        _set_env(REASON_ENV, _one.reason)
    return _one.cluster


def ensure_nodes_started() -> SlurmCluster | None:
    """Start the session's multi-node cluster once. Its SLURM_CONF is not exported: tests use its .env,
    and conftest.py gives it to the kernels of notebooks that use Slurm."""
    global nodes_summary
    if not _multi.attempted:
        _multi.ensure()
        nodes_summary = _multi.summary()
    return _multi.cluster


def current() -> SlurmCluster | None:
    return _one.cluster


def nodes_current() -> SlurmCluster | None:
    return _multi.cluster


def skip_reason() -> str | None:
    """Why there is no one-node test Slurm in this session, or None when there is one."""
    return _one.reason


def nodes_skip_reason() -> str | None:
    """Why there is no multi-node test Slurm in this session, or None when there is one."""
    return _multi.reason


def shutdown() -> None:
    """Stop the session's clusters (those we started) and restore the environment as it was."""
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    _multi.stop()
    _one.stop()
