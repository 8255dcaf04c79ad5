"""A running private Slurm, as the tests see it: its config, its nodes, its daemons, and the clients run
against it (tests/slurm_start.py starts one; tests/slurm_support.py keeps one of each kind per session).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import slurm_netns

# squeue -o %T names; a job in one of these states is over (squeue keeps showing it for MinJobAge).
FINISHED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
# Daemons live in /usr/sbin, which a non-login root shell or a venv'd PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])


class SlurmUnavailable(Exception):
    """No Slurm could be started here; the message says why (it becomes the tests' skip reason)."""


@dataclass
class SlurmCluster:
    """A running private Slurm: what tests need to submit to it, and the daemons to stop."""

    workdir: Path
    conf: Path
    node: str  # the first node (the only one of a one-node cluster)
    partition: str
    cpus: int  # per node
    version: str
    ports: tuple[int, int]
    nodes: list[str] = field(default_factory=list)
    network: slurm_netns.Network | None = None  # the nodes' namespaces, for a multi-node cluster
    idle_seconds: float = 0.0  # from start() until every node was idle
    started_seconds: float = 0.0  # ...until slurmctld's scheduler had run once: ready for jobs
    procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def address(self, node: str) -> str:
        """The IPv4 address a node's daemons and tasks use."""
        return self.network.address(node) if self.network else "127.0.0.1"

    def in_node(self, node: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command on a node, i.e. in its network namespace (on a one-node cluster: here)."""
        prefix = self.network.enter(node) if self.network else []
        return subprocess.run([*prefix, *argv], env=self.env, capture_output=True, text=True, timeout=timeout)

    @property
    def env(self) -> dict[str, str]:
        """os.environ with SLURM_CONF pointing at this cluster and the daemons' directories on PATH."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}

    def run(self, *args: str, timeout: float = 30, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm client (`run("sinfo", "-h")`) against this cluster; text output, never raises on exit code."""
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout, **kwargs)

    def job_state(self, job_id: str) -> str | None:
        """The job's state as squeue names it (RUNNING, COMPLETED, ...), or None once Slurm has forgotten it.

        `-t all`: without it, squeue -j prints nothing at all for a finished job (Slurm 22.05).
        """
        result = self.run("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T")
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return None
            raise RuntimeError(f"squeue -j {job_id} failed: {result.stderr.strip()}")
        return result.stdout.strip() or None

    def wait_job(self, job_id: str, timeout: float = 30, interval: float = 0.2) -> str | None:
        """Poll squeue until the job is over; returns its final state (None if already forgotten).

        Not `sbatch --wait`: it polls with a growing back-off and returns seconds late.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state is None or state in FINISHED_STATES:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout:.0f} s")
            time.sleep(interval)

    def log_tail(self, daemon: str, lines: int = 15) -> str:
        """The last lines a daemon wrote. In the foreground (-D, -F) all of them log to stderr, which
        we keep in <daemon>.out: that includes errors from before a log file is opened."""
        for path in (self.workdir / f"{daemon}.out", self.workdir / f"{daemon}.log"):
            text = path.read_text(errors="replace").strip() if path.exists() else ""
            if text:
                return "\n".join(text.splitlines()[-lines:])
        return "(it wrote nothing)"

    def stop(self) -> None:
        """Cancel our jobs, stop the daemons we started (by pid, newest first), remove the namespaces
        (and what is left in them), the /etc/hosts lines and the directory."""
        try:
            if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
                self._cancel_jobs()
            for name in reversed(list(self.procs)):
                _stop_process(self.procs.pop(name))
        finally:
            if self.network is not None:
                self.network.remove()
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _cancel_jobs(self, timeout: float = 15) -> None:
        """Jobs still running at the end would leave slurmstepd and their processes behind slurmd."""
        try:
            self.run("scancel", "-p", self.partition, timeout=10)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                active = self.run("squeue", "-h", "-t", "PD,CF,R,S,CG", "-o", "%i", timeout=10)
                if active.returncode != 0 or not active.stdout.strip():
                    return
                time.sleep(0.2)
        except subprocess.TimeoutExpired:
            pass


def _stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL: only this pid, which we started (other Slurms may run on the machine)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def which(name: str) -> str | None:
    return shutil.which(name, path=SEARCH_PATH)

