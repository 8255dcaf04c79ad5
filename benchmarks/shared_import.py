"""A shared import against cold tasks (kwnb/backends/shared_import.py): the same 2-task tf-keras fit through
`kwnb run`, its tasks forked from one interpreter that imported TensorFlow once, or each importing it itself
(KWNB_SHARED_IMPORT=0). The two alternate, the first of each round chosen at random; each `kwnb run` is timed
from its start to its exit, and its CPU is the command's and every process it reaped (the forker reaps its tasks
and is reaped in turn): RUSAGE_CHILDREN of this process, before and after. Ratios pair the two of a round.

`python -m benchmarks.shared_import [--rounds 7] [--out benchmarks/results/shared-import]`
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import log, machine_info, paired_ratios, row

FIT = """
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
x = tf.random.stateless_normal((256, 8), seed=(1, 2))
data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True))).repeat().batch(64)
model.fit(data, epochs=2, steps_per_epoch=5, verbose=2)
"""
METHODS = {"shared import": "1", "cold": "0"}
KWNB = [sys.executable, "-m", "kwnb", "run"]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(folder: Path, shared: str, name: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `kwnb run fit.py -n 2`."""
    env = {**os.environ, "KWNB_SHARED_IMPORT": shared, "KWNB_WARM": "0", "KWNB_NETWORK": "host"}
    began, cpu = time.monotonic(), _children_cpu()
    done = subprocess.run([*KWNB, "fit.py", "-n", "2", "--name", name], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=600)
    wall, spent = time.monotonic() - began, _children_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"kwnb run failed ({name}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return wall, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "shared-import")
    options = parser.parse_args()
    measured = {method: {"wall": [], "cpu": []} for method in METHODS}
    with tempfile.TemporaryDirectory(prefix="kwnb-bench-shared-") as folder:
        (Path(folder) / "fit.py").write_text(FIT)
        one_run(Path(folder), "0", "warmup")  # the page cache, once
        for number in range(options.rounds):
            order = random.sample(list(METHODS), len(METHODS))
            for method in order:
                wall, cpu = one_run(Path(folder), METHODS[method], f"r{number}")
                measured[method]["wall"].append(wall)
                measured[method]["cpu"].append(cpu)
                log(f"round {number + 1}: {method}: {wall:.1f} s, {cpu:.1f} CPU-s")
    rows = [row("shared import", metric, method, values[metric], unit)
            for method, values in measured.items() for metric, unit in (("wall", "s"), ("cpu", "CPU-s"))]
    rows += [row("shared import", metric, "shared import / cold",
                 paired_ratios(measured["shared import"][metric], measured["cold"][metric]), "ratio")
             for metric in ("wall", "cpu")]
    options.out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    (options.out / "latest.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=1, default=str) + "\n")
    lines = [f"# A shared import against cold tasks ({options.rounds} rounds, {machine['date']}, "
             f"{machine['cpu_count_logical']} CPUs, TensorFlow {machine['tensorflow']})", "",
             "| metric | method | median | p25-p75 | min-max |", "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['metric']} | {r['method']} | {r['median']:.2f} {r['unit']} | {r['p25']:.2f}-{r['p75']:.2f} | "
              f"{r['min']:.2f}-{r['max']:.2f} |" for r in rows]
    (options.out / "latest.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
