"""The test Slurm (conftest.py, tests/slurm_support.py) really schedules, runs and cancels jobs.

The Slurm backend's tests stand on this cluster, so its behaviour is checked here first: a job's
tasks, cancelling, rejected submissions, what squeue says about finished jobs, and that the
harness stops only what it started. Skips, with the reason, where no Slurm can be started.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import slurm_cluster
import slurm_start
import slurm_support

TASKS_SCRIPT = """#!/bin/bash
srun bash -c 'echo $SLURM_PROCID $SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE $SLURM_LOCALID'
"""


def _submit(slurm, *args: str) -> str:
    result = slurm.run("sbatch", "--parsable", "-p", slurm.partition, *args)
    assert result.returncode == 0, f"sbatch failed: {result.stderr}"
    return result.stdout.strip().split(";")[0]


def _job_pids(job_id: str) -> list[int]:
    """Processes on this machine that belong to the job (Slurm puts SLURM_JOB_ID in their environment)."""
    marker = f"SLURM_JOB_ID={job_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                pids.append(int(entry.name))
    return pids


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net shows them) with a TCP socket listening on the port."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_node_is_idle_in_the_default_partition(slurm):
    result = slurm.run("sinfo", "-h", "-o", "%P|%a|%D|%t|%N|%c")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [f"{slurm.partition}*|up|1|idle|{slurm.node}|{slurm.cpus}"]
    assert slurm.conf.exists() and os.environ["SLURM_CONF"] == str(slurm.conf)


def test_daemons_listen_on_loopback_only(slurm):
    loopback = "0100007F"  # 127.0.0.1 in /proc/net/tcp's byte order
    for port in slurm.ports:
        assert _listening(port) == {loopback}, f"port {port}"


def test_two_task_job_runs_both_tasks_and_stays_visible_when_done(slurm, tmp_path):
    script = tmp_path / "tasks.sh"
    script.write_text(TASKS_SCRIPT)
    out = tmp_path / "out.txt"
    started = time.monotonic()
    job = _submit(slurm, "-n", "2", "-J", "kwnb-two-tasks", "-o", str(out), str(script))
    assert slurm.wait_job(job, timeout=20) == "COMPLETED"
    turnaround = time.monotonic() - started
    lines = sorted(out.read_text().splitlines())
    assert lines == [f"0 {slurm.node} 2 0", f"1 {slurm.node} 2 1"]
    assert turnaround < 10, f"a trivial job took {turnaround:.1f} s"
    # What a backend following jobs with squeue must know: without -t, a finished job prints nothing.
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == ""
    assert slurm.run("squeue", "-h", "-j", job, "-t", "all", "-o", "%T|%j").stdout.split() == [
        "COMPLETED|kwnb-two-tasks"]


def test_failing_job_ends_failed(slurm, tmp_path):
    job = _submit(slurm, "-n", "1", "-o", str(tmp_path / "out.txt"), "--wrap", "echo about to fail; exit 3")
    assert slurm.wait_job(job, timeout=20) == "FAILED"
    assert slurm.run("squeue", "-h", "-j", job, "-t", "all", "-o", "%T").stdout.strip() == "FAILED"
    assert (tmp_path / "out.txt").read_text() == "about to fail\n"


def test_scancel_ends_a_sleeping_job_and_its_processes(slurm, tmp_path):
    job = _submit(slurm, "-n", "2", "-o", str(tmp_path / "out.txt"), "--wrap", "srun sleep 600")
    deadline = time.monotonic() + 15
    while slurm.job_state(job) != "RUNNING" or len(_job_pids(job)) < 3:  # batch shell, srun, the sleeps
        assert time.monotonic() < deadline, f"job {job} is {slurm.job_state(job)}, pids {_job_pids(job)}"
        time.sleep(0.1)
    cancelled = time.monotonic()
    result = slurm.run("scancel", job)
    assert result.returncode == 0, result.stderr
    assert slurm.wait_job(job, timeout=10) == "CANCELLED"
    while _job_pids(job):
        assert time.monotonic() - cancelled < 10, f"still running after scancel: {_job_pids(job)}"
        time.sleep(0.1)
    assert time.monotonic() - cancelled < 10


def test_invalid_partition_is_rejected_with_a_message(slurm):
    result = slurm.run("sbatch", "--parsable", "-p", "kwnb-no-such-partition", "--wrap", "true")
    assert result.returncode != 0
    assert "invalid partition" in result.stderr.lower(), result.stderr
    assert result.stdout.strip() == ""


def test_a_second_cluster_runs_beside_and_stops_only_its_own_daemons(slurm):
    """Two sessions on one machine (a developer's, a clean-clone check) each get ports of their own."""
    other = slurm_support.start(partition="second")
    try:
        assert set(other.ports).isdisjoint(slurm.ports)
        assert other.run("sinfo", "-h", "-o", "%P %t").stdout.split() == ["second*", "idle"]
        pids = [proc.pid for proc in other.procs.values()]
        assert len(pids) == 3 and all(Path(f"/proc/{pid}").exists() for pid in pids)
    finally:
        other.stop()
    assert not other.workdir.exists()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert slurm.run("sinfo", "-h", "-o", "%P %t").stdout.split() == [f"{slurm.partition}*", "idle"]
    assert all(proc.poll() is None for proc in slurm.procs.values())


def test_a_daemon_that_fails_is_named_with_its_log_and_the_rest_is_stopped(slurm, monkeypatch):
    spawned = []
    real_spawn = slurm_start._spawn

    def spawn(name, *args, **kwargs):
        proc = real_spawn(name, *args, **kwargs)
        spawned.append(proc)
        return proc

    monkeypatch.setattr(slurm_start, "_spawn", spawn)
    monkeypatch.setattr(slurm_start, "SLURM_CONF",
                        slurm_start.SLURM_CONF.replace("SelectType=select/cons_tres", "SelectType=select/kwnb-none"))
    with pytest.raises(slurm_support.SlurmUnavailable, match=r"slurmctld exited with code \d+") as error:
        slurm_support.start()
    assert "kwnb-none" in str(error.value)  # the log lines that say what is wrong
    assert len(spawned) == 2 and all(proc.poll() is not None for proc in spawned)  # munged stopped too


def test_missing_binaries_give_a_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(slurm_cluster, "SEARCH_PATH", str(tmp_path))
    with pytest.raises(slurm_support.SlurmUnavailable, match="Slurm is not installed here .*slurmctld"):
        slurm_support.check_prerequisites()


def test_the_reason_is_given_when_there_is_no_cluster():
    reason = slurm_support.skip_reason()
    if slurm_support.current() is not None:
        assert reason is None and "SLURM_CONF" in slurm_support.summary
    else:
        assert reason and os.environ[slurm_support.REASON_ENV] == reason
