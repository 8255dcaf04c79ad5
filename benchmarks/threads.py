"""Section 8: TensorFlow's thread pools under a 1-CPU quota (issue 22). Training throughput of the
benchmark job (2 workers, bare Popen) inside a cgroup v1 cpu group of one CPU (cfs_quota_us 100000 of
cfs_period_us 100000) that this section makes (root only; otherwise skipped, and the table says why):

  kwnb's threads    the thread variables kwnb sets for 2 tasks sharing 1 CPU
                    (kwnb.machine.task_env.thread_variables: TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS,
                    OMP_NUM_THREADS)
  TF defaults       none of them: TensorFlow sizes each task's pools from the machine's cores
  64-core node      what TensorFlow's defaults would be on a 64-core node with the same quota (the case
                    issue 22 describes), emulated here: intra- and inter-op pools of 64 threads a task

Both methods run in each round in a shuffled order; throughput is the chief's steps per second
between two marked steps (startup excluded), and the ratio pairs the methods of one round.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from .common import check, job, log, paired_ratios, read_markers, row, steps_per_second

CPU_V1 = Path("/sys/fs/cgroup/cpu")
SECTION = "8. threads under a 1-CPU quota"
METHODS = ("kwnb threads", "TF defaults", "64-core node")
LABELS = {"kwnb threads": "kwnb's thread variables", "TF defaults": "TensorFlow's defaults (machine cores)",
          "64-core node": "TensorFlow's defaults on a 64-core node (emulated: 64 + 64 threads a task)"}
NODE_64 = {"TF_NUM_INTRAOP_THREADS": "64", "TF_NUM_INTEROP_THREADS": "64", "OMP_NUM_THREADS": "64"}
RUN_TIMEOUT = 600.0


def make_group() -> tuple[Path | None, str]:
    """A 1-CPU cgroup v1 cpu group, or None and why not."""
    if os.geteuid() != 0:
        return None, "making a cgroup needs root"
    if not (CPU_V1 / "cgroup.procs").exists():
        return None, "no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu"
    group = CPU_V1 / f"kwnb-bench-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text("100000")
    return group, ""


def remove_group(group: Path) -> None:
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.2)


def run_in_group(cfg, workdir: Path, group: Path, threads: dict) -> dict:
    from .bringup import _cluster, _env

    folder = workdir / f"threads-{time.time_ns()}"
    folder.mkdir(parents=True)
    _, configs = _cluster(cfg.n)
    procs_file = str(group / "cgroup.procs")

    def join_group():  # in the child, before exec: every thread TensorFlow makes is in the group
        with open(procs_file, "w") as handle:
            handle.write(str(os.getpid()))

    args = ["--steps", str(cfg.thread_steps), "--mark-a", str(cfg.thread_mark_a), "--mark-b", str(cfg.thread_mark_b),
            "--verbose", "0"]
    procs = []
    for i, config in enumerate(configs):
        env = {k: v for k, v in _env(config).items() if k not in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                                                                     "OMP_NUM_THREADS")}
        with open(folder / f"worker-{i}.log", "wb") as out:
            procs.append(subprocess.Popen([sys.executable, str(job(cfg)), *args], stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, env={**env, **threads}, preexec_fn=join_group))
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(RUN_TIMEOUT))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append("timeout")
    chief = read_markers(folder / "worker-0.log")
    return {"ok": codes == [0] * cfg.n, "codes": codes, "threads": threads,
            "steps_per_s": steps_per_second(chief, cfg.thread_mark_a, cfg.thread_mark_b)}


def measure(cfg, workdir: Path, errors: list[str], kernel=None) -> dict:
    from kwnb.machine.task_env import thread_variables

    group, why = make_group()
    if group is None:
        log(f"section 8 skipped: {why}")
        return {"skipped": why}
    settings = {"kwnb threads": thread_variables({}, cfg.n, 1.0), "TF defaults": {}, "64-core node": NODE_64}
    samples: dict[str, list] = {method: [] for method in cfg.thread_methods}
    order = random.Random(cfg.seed + 7)
    try:
        for number in range(cfg.thread_rounds):
            methods = list(cfg.thread_methods)
            order.shuffle(methods)
            for method in methods:
                log(f"threads round {number + 1}/{cfg.thread_rounds}: {method}")
                result = run_in_group(cfg, workdir, group, settings[method])
                if not result["ok"]:
                    errors.append(f"threads, {method}: exit codes {result['codes']}")
                samples[method].append(result)
                time.sleep(cfg.pause)
    finally:
        remove_group(group)
    return {"samples": samples, "settings": settings}


def rows(data: dict, cfg) -> tuple[list[dict], list[str]]:
    if "skipped" in data:
        return [], [f"Section 8 (threads under a 1-CPU quota) was skipped: {data['skipped']}."]
    samples = data["samples"]
    present = [m for m in METHODS if m in samples]
    values = {m: [s["steps_per_s"] if s["ok"] else None for s in samples[m]] for m in present}
    metric = f"steps/s between steps {cfg.thread_mark_a} and {cfg.thread_mark_b}, 2 workers in 1 CPU of quota"
    out = [row(SECTION, metric, LABELS[m], values[m], "steps/s") for m in present]
    for baseline in ("TF defaults", "64-core node"):
        if not any(values.get(baseline) or []):
            continue
        ratio = row(SECTION, metric, f"{LABELS['kwnb threads']} / {LABELS[baseline]}",
                    paired_ratios(values["kwnb threads"], values[baseline]), "ratio", target=">= 1.0")
        ratio["target_met"] = check(ratio["median"], ">=", 1.0)
        out.append(ratio)
    said = ", ".join(f"{k}={v}" for k, v in data["settings"]["kwnb threads"].items())
    return out, [f"Section 8: kwnb's thread variables for 2 tasks in 1 CPU were {said}; TensorFlow's defaults use "
                 f"the machine's {os.cpu_count()} cores per task."]
