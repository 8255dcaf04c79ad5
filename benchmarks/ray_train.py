"""kwnb on Ray against Ray Train (issue 41): the same 2-worker tf-keras MultiWorkerMirroredStrategy fit
(workloads/train.py) on the test suite's 3-node Ray cluster (tests/ray_support.py: the head with no CPU,
two nodes of 2 CPUs, each node its own network namespace, token authentication), one worker per node.

  kwnb                kwnb.launch(train.py, 2, launcher="ray", address=HEAD, spread=True, cpus_per_task=1):
                      a placement group of two 1-CPU bundles, STRICT_SPREAD (one per node), an actor in each
                      that reserves a port and starts `python train.py` as a process of its own; TF_CONFIG
                      made by kwnb from the addresses the actors report; every line of output read back
                      through the actors into the run's logs here
  Ray Train           TensorflowTrainer(train_loop, scaling_config=ScalingConfig(num_workers=2,
                      resources_per_worker={"CPU": 1}, placement_strategy="STRICT_SPREAD")).fit(): Ray
                      Train's controller actor on the driver's node (0 CPU), its placement group of two 1-CPU
                      bundles, a worker actor in each, TF_CONFIG of `worker` tasks set by its
                      TensorflowConfig; train_loop runs train.py inside the worker actor (runpy), its output
                      going both to Ray's log stream (which this driver receives, as a notebook would) and to a
                      file the benchmark reads its markers from
  Ray Train, again    the same a second time in each round: an A/A pair, how far a ratio strays by noise alone

The driver (this process) joins the cluster once before the rounds, as a notebook that ran `ray.init` in
an earlier cell, with Ray's defaults (log_to_driver on). One untimed run of each method first (Ray's and
TensorFlow's first imports on the nodes). Then each round runs the three in an order shuffled every round
(seeded), each once the cluster's CPUs are all free again. Measured, from the call (launch / fit):
  first step   worker 0's `BENCH step 1` marker (its own clock)
  end          kwnb: run.wait() returned (the run is done: tasks ended, actors and group removed);
               Ray Train: fit() returned
  driver CPU   this process's user + system CPU seconds over the call to the end (kwnb: to its curves and
               timeline pictures drawn too): every thread in it, kwnb's supervisor and readers and Ray's
  head node CPU, cluster CPU   the same for the head's Ray processes (GCS, raylet, the actors it hosts:
               Ray Train's controller) and for every process of the cluster (training included), sampled
               every 0.25 s by a process of the benchmark's own (cpu_split.CpuSampler): none of it is the driver's
Ratios pair kwnb with Ray Train of the same round. Goal (issue 41): kwnb at or below Ray Train, ratio <= 1.

Needs Ray Train (`ray[train]`: pandas, pyarrow, fsspec, tensorboardX beside Ray); refuses in one line
without it. Root, for the cluster's network namespaces.

    python -m benchmarks.ray_train --rounds 3 --out benchmarks/results/ray-train
    python -m benchmarks.ray_train --smoke           # 1 round, a 5-step job, no A/A pair
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import runpy
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from .common import (ROOT, TRAIN, WORKER_ENV, check, describe, log, machine_info, paired_ratios, read_markers, row,
                     since, steps_per_second, write_results)
from .cpu_split import CpuSampler, by_thread, cpu_seconds, thread_cpu

METHODS = ("kwnb", "Ray Train", "Ray Train, again")
BASELINE = "Ray Train"
LABELS = {"kwnb": "kwnb.launch(launcher=\"ray\", spread=True)",
          "Ray Train": "Ray Train TensorflowTrainer.fit() (STRICT_SPREAD)",
          "Ray Train, again": "Ray Train, again (A/A)"}
TARGET = 1.0  # issue 41: kwnb at or below Ray Train
SECTION = "2 workers on a 3-node Ray cluster"
RUN_TIMEOUT = 600.0
# Why Ray Train's workers get TF_USE_LEGACY_KERAS from their start (measured with Ray 2.60, TF 2.21): its
# TensorflowConfig sets it only after the worker imported ray.train.tensorflow, whose checkpoint module
# resolves `tensorflow.keras` at import, to Keras 3; the fit under MultiWorkerMirroredStrategy then fails
# ("unsupported type ... PerReplica"). kwnb gives its tasks the variable before they start.
KERAS_NOTE = ("Ray Train's workers get WORKER_ENV (TF_USE_LEGACY_KERAS=1 among it) through "
              "RunConfig(worker_runtime_env=...): without it, tf.keras in them is Keras 3 and the "
              "MultiWorkerMirroredStrategy fit fails.")
FREE_TIMEOUT = 60.0  # s: the last run's bundles back in the cluster's free CPUs
CLUSTER_CPUS = 4.0  # ray_support: 2 nodes of 2 CPUs, the head none


def ray_train_missing() -> str | None:
    """One line saying how to get Ray Train, where its packages are not here (None where they are). Read from
    Ray's own metadata, not by importing ray.train: Ray reads its auth mode once, at its first use, and the
    cluster's token is set only when the cluster starts (tests/ray_support.py)."""
    try:
        version = metadata.version("ray")
    except metadata.PackageNotFoundError:
        return 'this benchmark needs Ray and Ray Train: pip install "ray[train]" (Ray is not installed)'
    wanted = [Requirement(line) for line in metadata.requires("ray") or []]
    missing = [r.name for r in wanted
               if r.marker and r.marker.evaluate({"extra": "train"}) and not _installed(r.name)]
    if missing:
        return (f'this benchmark needs Ray Train beside Ray {version}: pip install "ray[train]=={version}" '
                f'(or only {", ".join(missing)} into a folder on PYTHONPATH: benchmarks/README.md)')
    return None


def _installed(dist: str) -> bool:
    try:
        return bool(metadata.version(dist))
    except metadata.PackageNotFoundError:
        return False


# ----- Ray Train's side: runs in its worker actors ----------------------------------------------
class _Tee(io.TextIOBase):
    """The job's stdout to Ray's own stream (what a notebook sees) and to the marker file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self):
        for stream in self.streams:
            stream.flush()


def train_loop(config: dict) -> None:
    """train.py itself, as `python train.py ARGS`, inside the worker Ray Train started (TF_CONFIG is set)."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    argv = sys.argv
    with open(Path(config["folder"]) / f"rank-{rank}.log", "w") as marks, \
            contextlib.redirect_stdout(_Tee(sys.stdout, marks)):
        sys.argv = [config["script"], *config["args"]]
        try:
            runpy.run_path(config["script"], run_name="__main__")
        finally:
            sys.argv = argv


# ----- the driver's side -----------------------------------------------------------------------
def run_kwnb(args, cluster, workdir: Path) -> dict:
    import kwnb

    threads = thread_cpu()
    t0, cpu0 = time.time(), cpu_seconds()
    run = kwnb.launch(str(TRAIN), args.n, name="ray_bench", launcher="ray", address=cluster.address, spread=True,
                      cpus_per_task=1, runs_dir=workdir / "runs", args=job_args(args))
    named = {thread.native_id: thread.name for thread in threading.enumerate()}  # the run's threads, while it runs
    codes = run.wait(RUN_TIMEOUT)
    ended, cpu_done = time.time(), cpu_seconds() - cpu0
    if not run.done:
        run.stop("benchmark timeout")
        codes = run.exit_codes
    run.wait(RUN_TIMEOUT, pictures=True)
    cpu = cpu_seconds() - cpu0
    threads = by_thread(threads, thread_cpu(), cpu, named)
    markers = read_markers(run.workers[0].log_path)
    return {"ok": codes == [0] * args.n and 1 in markers["steps"], "exit_codes": codes, "t0": t0,
            "first_step_s": since(t0, markers["steps"].get(1)), "total_s": ended - t0,
            "pictures_s": time.time() - t0, "driver_cpu_s": cpu, "driver_cpu_done_s": cpu_done,
            "driver_threads": threads, "markers": markers, "nodes": [w.where for w in run.workers], "log": str(run.workers[0].log_path)}


def run_ray_train(args, cluster, workdir: Path) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    folder = Path(tempfile.mkdtemp(prefix="raytrain-", dir=workdir))
    trainer = TensorflowTrainer(
        train_loop, train_loop_config={"script": str(TRAIN), "args": job_args(args), "folder": str(folder)},
        scaling_config=ScalingConfig(num_workers=args.n, resources_per_worker={"CPU": 1},
                                     placement_strategy="STRICT_SPREAD"),
        run_config=RunConfig(name=folder.name, storage_path=str(workdir / "ray_results"),
                             worker_runtime_env={"env_vars": WORKER_ENV}))  # tf-keras: see KERAS_NOTE
    threads = thread_cpu()
    t0, cpu0 = time.time(), cpu_seconds()
    result = trainer.fit()
    ended = time.time()
    cpu = cpu_seconds() - cpu0
    threads = by_thread(threads, thread_cpu(), cpu, {})
    markers = read_markers(folder / "rank-0.log")
    return {"ok": result.error is None and 1 in markers["steps"], "error": None if result.error is None else
            str(result.error)[:300], "t0": t0, "first_step_s": since(t0, markers["steps"].get(1)),
            "total_s": ended - t0, "driver_cpu_s": cpu, "driver_threads": threads, "markers": markers,
            "log": str(folder / "rank-0.log")}


def job_args(args) -> list[str]:
    return ["--steps", str(args.steps), "--mark-a", str(args.mark_a), "--mark-b", str(args.mark_b)]


def run_method(method: str, args, cluster, workdir: Path) -> dict:
    wait_free()
    sampler = CpuSampler(cluster)
    try:
        sample = (run_kwnb if method == "kwnb" else run_ray_train)(args, cluster, workdir)
    except Exception as error:  # noqa: BLE001 - one broken method must not hide the others
        sampler.stop()
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
    sample.update({f"{part}_cpu_s": spent for part, spent in sampler.stop().items()})
    sample["driver_node_cpu_s"] = sample["driver_cpu_s"] + sample["head_cpu_s"]
    sample["steps_per_s"] = steps_per_second(sample.pop("markers"), args.mark_a, args.mark_b)
    return sample


def wait_free() -> None:
    """Until the last run's placement group has given its CPUs back (each method removes its own)."""
    import ray

    deadline = time.monotonic() + FREE_TIMEOUT
    while ray.available_resources().get("CPU", 0) < CLUSTER_CPUS and time.monotonic() < deadline:
        time.sleep(0.2)


def measure(args, cluster, workdir: Path, errors: list[str]) -> dict:
    import ray

    ray.init(address=cluster.address, logging_level="ERROR")  # as the notebook's earlier cell
    methods = METHODS[:2] if args.smoke else METHODS
    first = {}
    for method in [] if args.smoke else methods[:2]:
        log(f"first run (untimed) of {method}")
        first[method] = run_method(method, args, cluster, workdir)
    samples: dict[str, list] = {method: [] for method in methods}
    shuffle, loads = random.Random(args.seed).shuffle, []
    for r in range(args.rounds):
        order = list(methods)
        shuffle(order)
        for position, method in enumerate(order):
            loads.append(os.getloadavg()[0])
            sample = run_method(method, args, cluster, workdir)
            sample.update(round=r, position=position)
            if not sample.get("ok"):
                errors.append(f"round {r + 1} {method}: {sample.get('error') or sample.get('exit_codes')}")
            samples[method].append(sample)
            log(f"round {r + 1}/{args.rounds} {method}: first step {sample.get('first_step_s') or 0:.2f} s, "
                f"end {sample.get('total_s') or 0:.2f} s, driver CPU {sample.get('driver_cpu_s') or 0:.2f} s")
            time.sleep(args.pause)
    return {"samples": samples, "first_run": first, "load1": loads, "methods": methods}


def values(samples: dict, method: str, key: str) -> list:
    return [s.get(key) if s.get("ok") else None for s in samples[method]]


METRICS = (("first_step_s", "call to worker 0's first step", "s", True),
           ("total_s", "call to the end (kwnb: run done; Ray Train: fit() returned)", "s", True),
           ("driver_cpu_s", "driver's CPU, call to the end (this process, every thread; kwnb: pictures drawn too)",
            "CPU s", True),
           ("head_cpu_s", "head node's Ray processes' CPU (GCS, raylet, actors there: Ray Train's controller)",
            "CPU s", False),
           ("driver_node_cpu_s", "driver's node: the driver and the head node's Ray processes", "CPU s", False),
           ("cluster_cpu_s", "every process of the cluster (training included; not the driver)", "CPU s", False))


def rows(data: dict) -> list[dict]:
    samples, methods, out = data["samples"], data["methods"], []
    for key, metric, unit, goal in METRICS:
        out += [row(SECTION, metric, LABELS[m], values(samples, m, key), unit) for m in methods]
        for method in [m for m in methods if m != BASELINE]:
            targeted = goal and method == "kwnb"
            ratio = row(SECTION, metric, f"{LABELS[method]} / {LABELS[BASELINE]}",
                        paired_ratios(values(samples, method, key), values(samples, BASELINE, key)), "ratio",
                        target=f"<= {TARGET:g}" if targeted else "")
            ratio["target_met"] = check(ratio["median"], "<=", TARGET) if targeted else None
            out.append(ratio)
    out.append(row(SECTION, "driver's CPU, call to run done (before the pictures)", LABELS["kwnb"],
                   values(samples, "kwnb", "driver_cpu_done_s"), "CPU s"))
    out.append(row(SECTION, "call to curves and timeline pictures drawn", LABELS["kwnb"],
                   values(samples, "kwnb", "pictures_s"), "s"))
    out += [row(SECTION, "training speed, steps between the two marks", LABELS[m], values(samples, m, "steps_per_s"),
                "steps/s") for m in methods]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2, help="workers, one per node (default 2: the cluster has 2 nodes)")
    parser.add_argument("--steps", type=int, default=50, help="training steps of the job (default 50)")
    parser.add_argument("--mark-a", type=int, default=10)
    parser.add_argument("--mark-b", type=int, default=40)
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between methods (default 2)")
    parser.add_argument("--seed", default="ray-train")
    parser.add_argument("--smoke", action="store_true", help="1 round, a 5-step job, no A/A pair")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=None,
                        help="default benchmarks/results/ray-train (smoke: a temp folder)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps, args.mark_a, args.mark_b = 1, 5, 2, 4
    args.out = args.out or (Path(tempfile.mkdtemp(prefix="ray-train-smoke-")) if args.smoke
                            else ROOT / "benchmarks" / "results" / "ray-train")
    missing = ray_train_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    return measure_on_a_cluster(args, argv)


def measure_on_a_cluster(args, argv) -> int:
    sys.path.insert(0, str(ROOT / "tests"))  # the test suite's cluster, as its conftest uses it
    import ray_support

    started, errors = time.time(), []
    workdir = Path(tempfile.mkdtemp(prefix="kwnb-ray-train-"))
    machine = machine_info()
    machine.update(ray=metadata.version("ray"), uptime_before=uptime())
    log("starting the 3-node Ray cluster (60-110 s on a loaded machine)")
    cluster = ray_support.start()
    try:
        log(f"cluster up at {cluster.address} in {cluster.started_seconds:.0f} s")
        data = measure(args, cluster, workdir, errors)
    finally:
        ray_support.stop(cluster)
    machine["uptime_after"] = uptime()
    results = {"machine": machine, "config": {**vars(args), "out": str(args.out), "sections": ["ray_train"],
                                              "command": "python -m benchmarks.ray_train "
                                              + shlex.join(argv if argv is not None else sys.argv[1:])},
               "wall_seconds": time.time() - started, "load": {"load1": describe(data["load1"])},
               "rows": rows(data), "findings": findings(data, machine, cluster), "errors": errors,
               "samples": data["samples"], "first_run": data["first_run"]}
    json_path, md_path = write_results(results, args.out)
    print(md_path.read_text())
    return 0


def findings(data: dict, machine: dict, cluster) -> list[str]:
    first = data["first_run"]
    return [f"Ray {machine['ray']}; the cluster took {cluster.started_seconds:.0f} s to start.",
            "Untimed first runs: " + "; ".join(f"{m} first step {s.get('first_step_s') or 0:.1f} s, "
                                               f"end {s.get('total_s') or 0:.1f} s" for m, s in first.items()) + ".",
            f"uptime before: {machine['uptime_before']}; after: {machine['uptime_after']}.",
            *thread_findings(data),
            KERAS_NOTE,
            "Raw samples (and each run's worker-0 log) in latest.json."]


def thread_findings(data: dict) -> list[str]:
    """Where each method's driver CPU went: the median over its rounds of each thread's share, the largest first."""
    said = []
    for method in data["methods"]:
        rounds = [s["driver_threads"] for s in data["samples"][method] if s.get("ok")]
        names = {name for split in rounds for name in split}
        medians = {name: describe([split.get(name, 0.0) for split in rounds])["median"] for name in names}
        top = sorted(medians.items(), key=lambda item: -item[1])[:6]
        said.append(f"The driver's CPU by thread, {LABELS[method]} (median CPU s over {len(rounds)} rounds): "
                    + ", ".join(f"{name} {cpu:.2f}" for name, cpu in top) + ".")
    return said


def uptime() -> str:
    import subprocess

    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
