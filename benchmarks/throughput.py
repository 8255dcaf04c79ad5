"""Section 2: training throughput, the chief's steps per second under kwnb against bare Popen.

Its own runs, apart from section 1's: only the methods the target is about (kwnb in a kernel with
the dashboard, kwnb.launch, bare Popen, and bare Popen again as the A/A pair), the full training
job (steps mark_a to mark_b, about 11 s), and twice section 1's rounds: a 2 % target needs more
samples than a bring-up time, since runs of one method differ by several percent on a shared VM.
"""
from __future__ import annotations

from pathlib import Path

from .bringup import _values, aa_row, measure_methods, method_labels
from .common import check, paired_ratios, row

METHODS = ("kwnb", "kwnb.launch", "bare", "bare again")


def measure(cfg, workdir: Path, errors: list[str], kernel=None) -> dict:
    return measure_methods(cfg, workdir, errors, kernel, METHODS, cfg.throughput_rounds, "throughput")


def rows(data: dict, cfg) -> tuple[list[dict], list[str]]:
    samples, labels = data["samples"], method_labels(cfg)
    section = f"2. throughput, steps {cfg.mark_a}-{cfg.mark_b}"
    metric = "chief steps per second"
    mine = [m for m in ("kwnb", "kwnb.launch") if m in samples]
    out = [row(section, metric, labels[m], _values(samples, m, "steps_per_s"), "steps/s")
           for m in mine + [m for m in ("bare", "bare again") if m in samples]]
    if "bare" in samples:
        for method in mine:
            summary = row(section, metric, f"{labels[method]} / {labels['bare']}",
                          paired_ratios(_values(samples, method, "steps_per_s"), _values(samples, "bare", "steps_per_s")),
                          "ratio", target=">= 0.98")
            summary["target_met"] = check(summary["median"], ">=", 0.98)
            out.append(summary)
        if "bare again" in samples:
            out.append(aa_row(section, metric, samples, "steps_per_s", labels))
    if "kwnb" in samples:
        out.append(row(section, "kernel CPU s over the run", labels["kwnb"], _values(samples, "kwnb", "kernel_cpu_s"), "s"))
    findings = [f"{name} skipped: {reason}" for name, reason in data.get("skipped", {}).items()]
    return out, findings
