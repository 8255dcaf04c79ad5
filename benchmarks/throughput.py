"""Section 2: training throughput, the chief's steps per second under kwnb against bare Popen.

Its own runs, apart from section 1's: only the methods the target is about (kwnb in a kernel with
the dashboard, kwnb.launch, bare Popen, and bare Popen again as the A/A pair), the full training
job (steps mark_a to mark_b, about 11 s), and twice section 1's rounds: a 2 % target needs more
samples than a bring-up time, since runs of one method differ by several percent on a shared VM.
A smoke run is the exception: there both sections run the same 12-step job, so section 2 reads its
rows from section 1's runs of its four methods instead of starting them again (4 TensorFlow starts).
"""
from __future__ import annotations

from pathlib import Path

from .bringup import _values, aa_row, measure_methods, method_labels
from .common import check, paired_ratios, row

METHODS = ("kwnb", "kwnb.launch", "bare", "bare again")


def measure(cfg, workdir: Path, errors: list[str], kernel=None, bringup: dict | None = None) -> dict:
    if bringup is not None and same_job_as_bringup(cfg):
        return {"samples": {m: runs for m, runs in bringup["samples"].items() if m in METHODS},
                "skipped": {m: why for m, why in bringup.get("skipped", {}).items() if m in METHODS},
                "from_bringup": True}
    return measure_methods(cfg, workdir, errors, kernel, METHODS, cfg.throughput_rounds, "throughput")


def same_job_as_bringup(cfg) -> bool:
    """A smoke run's section 1 runs this very job (steps, marks, rounds): its runs measure section 2 too."""
    return (cfg.smoke and cfg.steps == cfg.bringup_steps and cfg.mark_b == cfg.bringup_steps
            and cfg.throughput_rounds == cfg.rounds)


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
    if data.get("from_bringup"):
        findings.append(f"Section 2 read its rows from section 1's runs of {', '.join(labels[m] for m in samples)}: "
                        f"in this smoke run both sections ran the same {cfg.steps}-step job.")
    return out, findings
