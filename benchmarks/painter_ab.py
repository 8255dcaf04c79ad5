"""Issue 31 item 5: the kernel's cost of the live curves, kwnb before the painter against kwnb after it.

Two source trees (BEFORE, e.g. `git archive cff7d38` unpacked, and this one), alternating in an order shuffled
every round (seeded): a fresh kernel per side and round (`%load_ext kwnb`), then section 7a's run, the
log-path writer (its lines carry `loss=` and `accuracy=`: the dashboard draws curves) for LINES lines with
the dashboard displayed, measured as run_job measures it (kernel.py: psutil from outside, all threads).
Reported per side: kernel CPU seconds per 100k lines, the kernel's memory growth (after the run, and its
peak), whether the kernel imported matplotlib, and the painter's own CPU seconds and memory (RSS, and PSS,
which does not count the libraries it shares; it is the kernel's child: what the machine pays instead). The one-off import is in every sample, as in a learner's
first run.

    python -m benchmarks.painter_ab --before /tmp/curves-base --rounds 5 --out benchmarks/results/painter
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
from pathlib import Path

import psutil

from . import kernel as kernels
from .common import ROOT, WRITER, describe, log, paired_ratios
from .kernelcost import FRESH_SETUP

LINES = 200_000
PAINTER = "kwnb.pictures.painter"


def painter_cost(process: psutil.Process) -> dict:
    """The painter among the kernel's children: its CPU seconds and resident memory (zeros where none runs)."""
    for child in process.children(recursive=True):
        try:
            if PAINTER in " ".join(child.cmdline()):
                times, memory = child.cpu_times(), child.memory_full_info()
                return {"painter_cpu_s": times.user + times.system, "painter_rss_mb": memory.rss / 2**20,
                        "painter_pss_mb": memory.pss / 2**20}
        except psutil.Error:
            continue
    return {"painter_cpu_s": 0.0, "painter_rss_mb": 0.0, "painter_pss_mb": 0.0}


def one_run(tree: Path, folder: Path, lines: int) -> dict:
    """A fresh kernel importing kwnb from `tree`, and one run of the writer in it with the dashboard shown."""
    kernels.ROOT = tree  # Kernel puts it first on the kernel's PYTHONPATH
    folder.mkdir(parents=True, exist_ok=True)
    kernel = kernels.Kernel(folder)
    try:
        kernel.execute(FRESH_SETUP)
        result = kernels.run_job(kernel, "kwnb", WRITER, 1, ["bulk", str(lines)], "lines", folder, probe=False)
        result.update(kernel.execute_json("print(json.dumps({'mpl': 'matplotlib.figure' in sys.modules, "
                                          "'kwnb': kwnb.__file__}))"))
        result.update(painter_cost(kernel.process))
    finally:
        kernel.close()
        kernels.ROOT = ROOT
    result["cpu_per_100k_s"] = result["kernel_cpu_s"] / (lines / 100_000)
    result["total_cpu_per_100k_s"] = (result["kernel_cpu_s"] + result["painter_cpu_s"]) / (lines / 100_000)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the source tree of kwnb before the painter")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=LINES)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "painter")
    parser.add_argument("--seed", default="painter")
    args = parser.parse_args(argv)
    sides = {"before": args.before.resolve(), "after": ROOT}
    samples: dict[str, list] = {side: [] for side in sides}
    shuffle = random.Random(args.seed).shuffle
    raw = Path(tempfile.mkdtemp(prefix="kwnb-painter-ab-"))  # the writer's logs: about 16 MB a run
    for r in range(args.rounds):
        order = list(sides)
        shuffle(order)
        for side in order:
            result = one_run(sides[side], raw / f"{side}-{r}", args.lines)
            result.update(round=r, order=order.index(side))
            samples[side].append(result)
            log(f"round {r + 1}/{args.rounds} {side}: kernel {result['cpu_per_100k_s']:.3f} CPU-s per 100k lines, "
                f"+{result['rss_after_growth_mb']:.1f} MB (peak +{result['rss_peak_growth_mb']:.1f}), matplotlib "
                f"{result['mpl']}, painter {result['painter_cpu_s']:.2f} CPU-s {result['painter_rss_mb']:.0f} MB")
    summary = {key: {side: describe([s[key] for s in samples[side] if s.get("ok")]) for side in sides}
               for key in ("cpu_per_100k_s", "total_cpu_per_100k_s", "rss_after_growth_mb", "rss_peak_growth_mb",
                           "painter_cpu_s", "painter_rss_mb", "painter_pss_mb", "run_s")}
    summary["after / before, kernel CPU (paired)"] = describe(paired_ratios(
        [s["cpu_per_100k_s"] for s in samples["after"]], [s["cpu_per_100k_s"] for s in samples["before"]]))
    shutil.rmtree(raw, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    for side in sides:
        for sample in samples[side]:
            sample.pop("logs", None)
    (args.out / "latest.json").write_text(json.dumps({"lines": args.lines, "sides": {k: str(v) for k, v in sides.items()},
                                                      "summary": summary, "samples": samples}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
