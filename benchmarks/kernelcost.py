"""Section 7: the kernel's cost of a run (issue 22 item 3), in real kernels with the dashboard displayed.

a. Fixed cost: each round starts a fresh kernel (`%load_ext kwnb`, nothing drawn yet, kwnb's dashboard
   not yet imported) and runs the log-path writer for FIXED_LINES lines, then once more in the same kernel.
   Kernel CPU seconds (psutil, all threads) and peak resident memory growth over each run.
b. Many tasks: in section 3's kernel, N = 4, 16, 64 light tasks (workloads/progress.py: no TensorFlow,
   Keras-like progress redrawn 10 times a second for TASK_SECONDS) launched with the dashboard displayed.
   Kernel CPU seconds per task-second (CPU / (N x run seconds)), and its ratio 64 / 4 per round: the
   kernel's cost must grow with the tasks, not faster.
The marginal cost per line (the slope between 100k and 1M lines) is a row of section 3 (logpath.py).
"""
from __future__ import annotations

from pathlib import Path

from .common import WORKLOADS, WRITER, check, log, paired_ratios, row
from .kernel import Kernel, run_job

PROGRESS = WORKLOADS / "progress.py"
FRESH_SETUP = """
%load_ext kwnb
import json, sys, time
import kwnb
from IPython.display import display
print("ready")
"""
FIXED_LINES = 1000
TASK_SECONDS = 20.0


def measure(cfg, kernel: Kernel, workdir: Path, errors: list[str]) -> dict:
    samples: dict = {"fixed": [], "tasks": []}
    lines = str(100 if cfg.smoke else FIXED_LINES)
    for r in range(cfg.rounds):
        log(f"kernel cost round {r + 1}/{cfg.rounds}: a fresh kernel's first and second run")
        fresh = None
        try:
            folder = workdir / f"fresh-{r}"
            folder.mkdir(parents=True, exist_ok=True)
            fresh = Kernel(folder)
            fresh.execute(FRESH_SETUP)
            for which in ("first", "second"):
                result = run_job(fresh, "kwnb", WRITER, 1, ["bulk", lines], "fixed", folder, probe=False)
                result.update(round=r, which=which, mpl=fresh.execute_json(
                    "print(json.dumps('matplotlib.figure' in sys.modules))"))
                samples["fixed"].append(result)
                log(f"  -> {which}: kernel CPU {result['kernel_cpu_s']:.3f} s, peak +{result['rss_peak_growth_mb']:.1f} MB,"
                    f" matplotlib loaded: {result['mpl']}")
        except Exception as error:  # noqa: BLE001
            errors.append(f"kernel cost round {r + 1}, fixed: {type(error).__name__}: {error}")
        finally:
            if fresh is not None:
                fresh.close()
        seconds = 3.0 if cfg.smoke else TASK_SECONDS
        for n in cfg.task_counts[r % 2:] + cfg.task_counts[: r % 2]:  # the order turns, round by round
            log(f"kernel cost round {r + 1}/{cfg.rounds}: {n} light tasks for {seconds:g} s")
            result = {"round": r, "n": n}
            try:
                result.update(run_job(kernel, "kwnb", PROGRESS, n, [str(seconds)], f"tasks{n}", workdir / "tasks",
                                      probe=False, timeout=seconds * 6 + 60))
                result["cpu_per_task_s"] = result["kernel_cpu_s"] / (n * result["run_s"])
            except Exception as error:  # noqa: BLE001
                result.update(ok=False, error=f"{type(error).__name__}: {error}")
            if not result.get("ok"):
                errors.append(f"kernel cost round {r + 1}, {n} tasks: {result.get('error') or result.get('exit_codes')}")
            samples["tasks"].append(result)
            log(f"  -> kernel CPU {result.get('kernel_cpu_s', float('nan')):.3f} s over {result.get('run_s') or 0:.1f} s, "
                f"{result.get('cpu_per_task_s', float('nan')) * 1000:.2f} ms per task-second")
    return samples


def rows(samples: dict, cfg) -> tuple[list[dict], list[str]]:
    out, findings = [], []
    section = "7. kernel cost of a run, real kernel + dashboard"
    for which, label in (("first", "a fresh kernel's first run"), ("second", "the same kernel's second run")):
        runs = [s for s in samples["fixed"] if s["which"] == which]
        cpu = [s["kernel_cpu_s"] if s.get("ok") else None for s in runs]
        mem = [s["rss_peak_growth_mb"] if s.get("ok") else None for s in runs]
        summary = row(section, f"kernel CPU s, {label} ({FIXED_LINES:,} lines)", "kwnb", cpu, "s", target="<= 0.3")
        summary["target_met"] = check(summary["median"], "<=", 0.3)
        out.append(summary)
        summary = row(section, f"kernel memory growth (peak RSS - before), {label}", "kwnb", mem, "MB",
                      target="<= 20")
        summary["target_met"] = check(summary["median"], "<=", 20)
        out.append(summary)
        loaded = [s for s in runs if s.get("mpl")]
        if loaded:
            findings.append(f"matplotlib was loaded into the kernel by {label} in {len(loaded)} of {len(runs)} rounds.")
    by_n = {}
    for n in cfg.task_counts:
        by_n[n] = [s.get("cpu_per_task_s") if s.get("ok") else None
                   for s in sorted((s for s in samples["tasks"] if s["n"] == n), key=lambda s: s["round"])]
        if any(v is not None for v in by_n[n]):
            out.append(row(section, f"kernel CPU s per task-second, {n} light tasks", "kwnb", by_n[n], "s"))
    small, large = min(cfg.task_counts), max(cfg.task_counts)
    if small != large and by_n.get(large):
        summary = row(section, f"kernel CPU per task-second, {large} tasks / {small} tasks", "kwnb",
                      paired_ratios(by_n[large], by_n[small]), "ratio", target="<= 1")
        summary["target_met"] = check(summary["median"], "<=", 1.0)
        out.append(summary)
    return out, findings
