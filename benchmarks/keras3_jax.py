"""Keras 3 across processes on JAX (issue 40): the same 2-process job through kwnb (`framework="jax"`) and
started by hand with the variables set, as a learner without kwnb would start it.

  by hand           two Popen of workloads/keras3_jax.py, each with KERAS_BACKEND=jax, JAX_PLATFORMS=cpu,
                    PYTHONUNBUFFERED=1 and the three KERAS_DISTRIBUTION_* (process 0 the coordinator, on a
                    port picked free just before), output to a log file each, then wait() for both
  by hand, again    the same launch a second time in each round: an A/A pair, whose ratio shows how far a
                    ratio strays from 1 by noise alone
  kwnb cold         kwnb.launch(job, n=2, framework="jax", warm=False): every task a new interpreter
  kwnb warm         kwnb.launch(..., warm=True), a re-run: after each kwnb warm run the benchmark waits until
                    the pool has refilled (rerun.wait_refilled), so that no refill overlaps the next method;
                    the group starts with an untimed first run that fills the pool

Each round runs the four in an order shuffled every round (seeded). Times are from the launch call to
process 0's `BENCH step 1` marker (its own clock) and to every process exited (kwnb: Run.ended_at; by
hand: the last wait() returning); ratios pair kwnb with "by hand" of the same round. kwnb runs on the network
it picks by default (private where the machine allows); by hand runs on the host's. Goal (issue 40): kwnb at
or below by hand, ratio <= 1.

    python -m benchmarks.keras3_jax --rounds 5 --out benchmarks/results/keras3-jax
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import (ROOT, WORKLOADS, check, describe, log, machine_info, markdown, paired_ratios, read_markers, row,
                     since, write_results)
from .rerun import empty_pool, own_defaults, wait_refilled

JOB = WORKLOADS / "keras3_jax.py"
RUN_TIMEOUT = 300.0
FAILED_GRACE = 10.0  # s: kwnb's own failure grace is 5 s by default
METHODS = ("by hand", "by hand, again", "kwnb cold", "kwnb warm")
BASELINE = "by hand"
LABELS = {"by hand": "by hand (Popen, variables set)", "by hand, again": "by hand, again (A/A)",
          "kwnb cold": "kwnb.launch, cold", "kwnb warm": "kwnb.launch, warm re-run"}
TARGET = 1.0  # issue 40: at or below by hand
SECTION = "Keras 3 on JAX, 2 processes"


def by_hand_env(port: int, n: int, process_id: int) -> dict:
    """What a learner sets by hand for one process (the variables keras.distribution.initialize() reads)."""
    return {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1",
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": f"localhost:{port}", "KERAS_DISTRIBUTION_NUM_PROCESSES": str(n),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(process_id)}


def result(t0: float, markers: dict, ended: float, codes: list, **extra) -> dict:
    return {"ok": all(code == 0 for code in codes) and 1 in markers["steps"], "exit_codes": codes,
            "start_s": since(t0, markers.get("start")), "joined_s": since(t0, markers.get("imported")),
            "first_step_s": since(t0, markers["steps"].get(1)), "total_s": ended - t0, **extra}


def run_by_hand(args, workdir: Path) -> dict:
    import portpicker

    folder = Path(tempfile.mkdtemp(prefix="hand-", dir=workdir))
    t0 = time.time()
    port = portpicker.pick_unused_port()
    processes = []
    for i in range(args.n):
        with open(folder / f"process-{i}.log", "wb") as out:
            processes.append(subprocess.Popen([sys.executable, str(JOB), "--steps", str(args.steps)],
                                              stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                              env=by_hand_env(port, args.n, i)))
    codes = wait_all(processes)
    ended = time.time()
    return result(t0, read_markers(folder / "process-0.log"), ended, codes, log=str(folder / "process-0.log"))


def wait_all(processes: list[subprocess.Popen]) -> list[int]:
    """Every process's exit code. One that fails leaves the others waiting minutes for JAX's timeouts (issue
    40: 300 s to register, or at shutdown); they are killed FAILED_GRACE s after it, as a learner would end them."""
    deadline, failed_at = time.monotonic() + RUN_TIMEOUT, None
    while time.monotonic() < deadline and any(process.poll() is None for process in processes):
        if failed_at is None and any(process.poll() not in (None, 0) for process in processes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > FAILED_GRACE:
            break
        time.sleep(0.05)
    for process in processes:
        if process.poll() is None:
            process.kill()
    return [process.wait() for process in processes]


def run_kwnb(args, workdir: Path, warm: bool) -> dict:
    import kwnb

    t0 = time.time()
    run = kwnb.launch(str(JOB), n=args.n, name="keras3_jax", framework="jax", warm=warm, runs_dir=workdir / "runs",
                      args=["--steps", str(args.steps)])
    codes = run.wait(RUN_TIMEOUT)
    if not run.done:
        run.stop("benchmark timeout")
        codes = run.exit_codes
    ended = run.ended_at or time.time()
    tasks = run.snapshot().workers  # as values: their peak memory too
    out = result(t0, read_markers(run.workers[0].log_path), ended, codes, warm=[task.warm for task in tasks],
                 peak_rss_mb=[task.peak_rss / 2**20 for task in tasks], log=str(run.workers[0].log_path))
    if warm:
        out["pool"] = wait_refilled(args.n, ended, args.refill_timeout)
    return out


def run_method(method: str, args, workdir: Path) -> dict:
    try:
        if method.startswith("by hand"):
            return run_by_hand(args, workdir)
        return run_kwnb(args, workdir, warm=method == "kwnb warm")
    except Exception as error:  # noqa: BLE001 - one broken method must not hide the others
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def measure(args, workdir: Path, errors: list[str]) -> dict:
    samples: dict[str, list] = {method: [] for method in METHODS}
    loads = []
    shuffle = random.Random(args.seed).shuffle
    with own_defaults(None):  # warm starts on, kwnb's own network, the pool's wait for quiet CPUs off
        empty_pool()
        log("first run (untimed) of kwnb warm: fills the pool")
        first = run_method("kwnb warm", args, workdir)
        for r in range(args.rounds):
            order = list(METHODS)
            shuffle(order)
            for position, method in enumerate(order):
                loads.append(os.getloadavg()[0])
                sample = run_method(method, args, workdir)
                sample.update(round=r, position=position)
                if not sample.get("ok"):
                    errors.append(f"round {r + 1} {method}: {sample.get('error') or sample.get('exit_codes')}")
                samples[method].append(sample)
                log(f"round {r + 1}/{args.rounds} {method}: first step {sample.get('first_step_s') or 0:.2f} s, "
                    f"run {sample.get('total_s') or 0:.2f} s" + (f", warm {sum(sample['warm'])}/{args.n}"
                                                                  if "warm" in sample else ""))
                if "pool" not in sample:
                    time.sleep(args.pause)
        empty_pool()
    return {"samples": samples, "first_run": first, "load1": loads}


def values(samples: dict, method: str, key: str) -> list:
    return [s.get(key) if s.get("ok") else None for s in samples[method]]


def rows(data: dict, args) -> list[dict]:
    samples, out = data["samples"], []
    for key, metric in (("first_step_s", "launch call to process 0's first step"),
                        ("total_s", "whole run: launch call to every process exited")):
        out += [row(SECTION, metric, LABELS[m], values(samples, m, key), "s") for m in METHODS]
        for method in ("kwnb cold", "kwnb warm", "by hand, again"):
            ratio = row(SECTION, metric, f"{LABELS[method]} / {LABELS[BASELINE]}",
                        paired_ratios(values(samples, method, key), values(samples, BASELINE, key)), "ratio",
                        target="" if method == "by hand, again" else f"<= {TARGET:g}")
            ratio["target_met"] = None if method == "by hand, again" else check(ratio["median"], "<=", TARGET)
            out.append(ratio)
    out += [row(SECTION, "launch call to process 0 joined (keras.distribution.initialize() returned)", LABELS[m],
                values(samples, m, "joined_s"), "s") for m in METHODS]
    for method in ("kwnb cold", "kwnb warm"):
        out.append(row(SECTION, f"tasks started warm (of {args.n})", LABELS[method],
                       [sum(s["warm"]) if "warm" in s else None for s in samples[method]], "tasks"))
        out.append(row(SECTION, "peak memory per process (kwnb's sample, process tree)", LABELS[method],
                       [mb for s in samples[method] if s.get("ok") for mb in s["peak_rss_mb"]], "MiB"))
    out.append(row(SECTION, "pool refill: run end to every warm interpreter ready", LABELS["kwnb warm"],
                   [s["pool"]["refill_s"] if s.get("pool", {}).get("ready") else None for s in samples["kwnb warm"]],
                   "s"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--steps", type=int, default=30, help="training steps of the job (default 30)")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between methods (default 2)")
    parser.add_argument("--refill-timeout", type=float, default=180.0)
    parser.add_argument("--seed", default="keras3-jax")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "keras3-jax")
    args = parser.parse_args(argv)
    started, errors = time.time(), []
    workdir = Path(tempfile.mkdtemp(prefix="kwnb-keras3-jax-"))
    machine = machine_info()
    machine.update(keras=_version("keras"), jax=_version("jax"))
    data = measure(args, workdir, errors)
    first = data["first_run"]
    findings = [f"The untimed first run (cold, it fills the pool): first step {first.get('first_step_s')}, "
                f"whole run {first.get('total_s')} s, warm {first.get('warm')}.",
                f"Keras {machine['keras']}, jax {machine['jax']}; raw samples and logs' paths in latest.json."]
    results = {"machine": machine, "config": {**vars(args), "out": str(args.out), "smoke": False,
                                              "sections": ["keras3_jax"], "command": "python -m benchmarks.keras3_jax "
                                              + " ".join(argv if argv is not None else sys.argv[1:])},
               "wall_seconds": time.time() - started, "load": {"load1": describe(data["load1"])},
               "rows": rows(data, args), "findings": findings, "errors": errors, "samples": data["samples"],
               "first_run": first}
    json_path, md_path = write_results(results, args.out)
    print(md_path.read_text())
    return 0


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
