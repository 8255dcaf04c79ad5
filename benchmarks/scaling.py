"""Section 4: scaling with the number of workers, in a real kernel with the dashboard displayed.

For N in 1, 2, 4, 8 workers of a tiny model (train.py, a few steps), alternating kwnb (launch +
display) and plain bare Popen (kwnb's workers share the kernel's session too) from the same kernel:
bring-up (every port accepting, chief's first step) and the kernel's CPU seconds over the whole run.
"""
from __future__ import annotations

from pathlib import Path

from .common import job, log, paired_ratios, read_markers, row
from .kernel import Kernel, run_job


def measure(cfg, kernel: Kernel, workdir: Path, errors: list[str]) -> list[dict]:
    samples = []
    args = ["--steps", str(cfg.scaling_steps), "--mark-a", "1", "--mark-b", str(cfg.scaling_steps)]
    methods = ["kwnb", "bare"]
    for r in range(cfg.scaling_rounds):
        sizes = cfg.scaling_sizes[r % len(cfg.scaling_sizes):] + cfg.scaling_sizes[: r % len(cfg.scaling_sizes)]
        for n in sizes:
            for method in (methods if r % 2 == 0 else methods[::-1]):
                log(f"scaling round {r + 1}/{cfg.scaling_rounds}: {n} workers, {method}")
                result = {"round": r, "n": n, "method": method}
                try:
                    result.update(run_job(kernel, method, job(cfg), n, args, "scale", workdir / "scaling"))
                    chief = read_markers(result["logs"][0])
                    first = chief.get("steps", {}).get(1)
                    result["first_step_s"] = None if first is None else first - result["t0"]
                except Exception as error:  # noqa: BLE001
                    result.update(ok=False, error=f"{type(error).__name__}: {error}")
                if not result.get("ok"):
                    errors.append(f"scaling round {r + 1} n={n} {method}: {result.get('error') or result.get('exit_codes')}")
                samples.append(result)
                log(f"  -> ports {result.get('ports_s')}, first step {result.get('first_step_s')}, "
                    f"kernel CPU {result.get('kernel_cpu_s')}")
    return samples


def rows(samples: list[dict], cfg) -> tuple[list[dict], list[str]]:
    out = []
    section = "4. scaling, real kernel + dashboard"

    def pick(method, n, key):
        return [s.get(key) if s.get("ok") else None
                for s in sorted((s for s in samples if s["method"] == method and s["n"] == n), key=lambda s: s["round"])]

    for n in sorted(cfg.scaling_sizes):
        for key, metric in (("ports_s", "every worker's port accepts"), ("first_step_s", "chief's first step done")):
            kwnb, bare = pick("kwnb", n, key), pick("bare", n, key)
            out.append(row(section, f"{metric}, N={n}", "kwnb", kwnb, "s"))
            out.append(row(section, f"{metric}, N={n}", "bare Popen", bare, "s"))
            out.append(row(section, f"{metric}, N={n}", "kwnb / bare Popen", paired_ratios(kwnb, bare), "ratio"))
        kwnb, bare = pick("kwnb", n, "kernel_cpu_s"), pick("bare", n, "kernel_cpu_s")
        out.append(row(section, f"kernel CPU s over the run, N={n}", "kwnb", kwnb, "s"))
        out.append(row(section, f"kernel CPU s over the run, N={n}", "bare Popen", bare, "s"))
        runs = pick("kwnb", n, "run_s")
        out.append(row(section, f"kernel CPU share while running (CPU s / run s), N={n}", "kwnb",
                       [c / t if c is not None and t else None for c, t in zip(kwnb, runs)], "x"))
    return out, []
