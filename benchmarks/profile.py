"""Section 5: where kwnb's own time goes, and what the live curves (kwnb/pictures/plotting.py LiveCurves) saved.

a. The supervisor's cost with N idle workers (workloads/idle.py sleeps; no output, no TensorFlow):
   this process's CPU seconds per second of run.
b. The log path's parsing cost per 100k plain lines, component by component (reading the file,
   TerminalScreen.feed_text, the runtime-line count, MetricsParser.feed, TfLogScanner.feed).
c. One instrumented kwnb run in the kernel: thread CPU seconds per kwnb function.
d. The training job in the kernel with the dashboard, kwnb as it is against the curves drawn as
   before LiveCurves (benchmarks/patches.py), alternating.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import psutil

from .common import IDLE, log, paired_ratios, row
from .hooks import (DASHBOARD_CURVES, DASHBOARD_REFRESH, DESCENDANTS, FOLLOWER_READ, METRICS_FEED, RUN_FINISH, RUN_REFRESH,
                    RUN_SUPERVISE, SCREEN_FEED, TASK_OBSERVE)
from .workloads.writer import PAD


def _process_cpu() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def supervisor(cfg, workdir: Path, errors: list[str]) -> list[dict]:
    import kwnb

    samples = []
    # An untimed first launch: importing and first-use costs (psutil, portpicker) are paid once per
    # process and are not the supervisor's cost per second; when this section runs alone they would be.
    kwnb.launch(IDLE, n=1, name="warm-up", runs_dir=workdir / "idle", args=["0"]).wait(60)
    for r in range(cfg.rounds):
        for n in cfg.idle_sizes:
            try:
                cpu0 = _process_cpu()
                run = kwnb.launch(IDLE, n=n, name="idle", runs_dir=workdir / "idle", args=[str(cfg.idle_seconds)])
                run.wait(60)
                cpu = _process_cpu() - cpu0
                samples.append({"round": r, "n": n, "ok": run.exit_codes == [0] * n,
                                "cpu_s": cpu, "run_s": run.elapsed, "cpu_per_s": cpu / run.elapsed})
            except Exception as error:  # noqa: BLE001
                errors.append(f"supervisor profile n={n}: {type(error).__name__}: {error}")
        log(f"supervisor profile round {r + 1}/{cfg.rounds} done")
    return samples


def _parse_costs(text_path: Path, lines: int) -> dict:
    """What Task.apply does with each chunk of a log (kwnb/engine/tasks/task.py), part by part."""
    from kwnb.engine.readers import tf_messages
    from kwnb.engine.readers.follow import FileFollower
    from kwnb.engine.readers.metrics import MetricsParser
    from kwnb.engine.readers.screen import TerminalScreen

    follower, screen, parser = FileFollower(text_path), TerminalScreen(300), MetricsParser()
    scanner = tf_messages.TfLogScanner()
    costs = {"read": 0.0, "screen": 0.0, "runtime": 0.0, "metrics": 0.0, "messages": 0.0}
    while True:
        t = time.process_time()
        text = follower.read_new()
        costs["read"] += time.process_time() - t
        if not text:
            break
        t = time.process_time()
        finished = screen.feed_text(text)
        costs["screen"] += time.process_time() - t
        t = time.process_time()
        tf_messages.count_runtime_lines(finished)
        costs["runtime"] += time.process_time() - t
        t = time.process_time()
        parser.feed(text)
        costs["metrics"] += time.process_time() - t
        t = time.process_time()
        scanner.feed(text)
        costs["messages"] += time.process_time() - t
    per = lines / 100_000
    return {k: v / per for k, v in costs.items()}


def parsing(cfg, errors: list[str]) -> dict:
    lines = cfg.parse_lines
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plain.log"
        with open(path, "w") as handle:
            for i in range(lines):
                handle.write(f"line {i:07d} {PAD}\n")
        samples = []
        for r in range(cfg.rounds):
            samples.append({"round": r, **_parse_costs(path, lines)})
    return {"samples": samples}


def rows(supervisor_samples: list[dict], parse: dict, cfg) -> tuple[list[dict], list[str]]:
    out = []
    section = "5. profile of kwnb (this process)"
    for n in cfg.idle_sizes:
        values = [s["cpu_per_s"] if s["ok"] else None for s in sorted(
            (s for s in supervisor_samples if s["n"] == n), key=lambda s: s["round"])]
        out.append(row(section, f"supervisor CPU s per s, {n} idle workers", "kwnb", values, "s/s"))
    labels = {"read": "FileFollower.read_new", "screen": "TerminalScreen.feed_text",
              "runtime": "tf_messages.count_runtime_lines", "metrics": "MetricsParser.feed",
              "messages": "TfLogScanner.feed"}
    for part, label in labels.items():
        if all(part in s for s in parse["samples"]):  # runs before 2026-11-24 measured three parts
            out.append(row(section, f"CPU s per 100k plain lines: {label}", "kwnb",
                           [s[part] for s in parse["samples"]], "s"))
    return out, []


KERNEL_HOOK = r"""
import functools as _functools
import importlib as _importlib
_kprof, _kprof_saved = {}, []
def _kprof_wrap(owner, name, label):
    original = getattr(owner, name)
    _kprof_saved.append((owner, name, original))
    @_functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            cell = _kprof.setdefault(label, [0.0, 0])
            cell[0] += time.thread_time() - start
            cell[1] += 1
    setattr(owner, name, timed)
for _module, _owner, _name, _label in %r:
    _kprof_wrap(getattr(_importlib.import_module(_module), _owner), _name, _label)
print("hooked")
"""

KERNEL_UNHOOK = """
for _owner, _name, _original in reversed(_kprof_saved):
    setattr(_owner, _name, _original)
print(json.dumps(_kprof))
"""

# (hook, label); nested: the supervisor thread contains one poll, which contains the rest. The labels
# are the results' keys, kept as they were: Run._supervise is now Supervisor.supervise, Run._refresh
# RunEngine.refresh (engine/live/run_engine.py) and Run._finish Supervisor._finish (engine/live/supervisor.py).
KERNEL_FUNCTIONS = [
    (RUN_SUPERVISE, "Run._supervise (whole supervisor thread, kwnb/engine/live/run.py)"),
    (RUN_REFRESH, "  Run._refresh (kwnb/engine/live/run.py)"),
    (DESCENDANTS, "    LocalProcess._remember_descendants (kwnb/backends/local.py)"),
    (FOLLOWER_READ, "    FileFollower.read_new (kwnb/engine/readers/follow.py)"),
    (SCREEN_FEED, "    TerminalScreen.feed_text (kwnb/engine/readers/screen.py)"),
    (METRICS_FEED, "    MetricsParser.take (kwnb/engine/readers/metrics.py)"),
    (TASK_OBSERVE, "    Task.observe: log reads, poll, port probe (kwnb/engine/tasks/task.py)"),
    (RUN_FINISH, "  Run._finish: on_end callbacks, save_curves + summary (kwnb/engine/live/run.py)"),
    (DASHBOARD_REFRESH, "Dashboard.refresh (whole dashboard thread, kwnb/notebook/dashboard.py)"),
    (DASHBOARD_CURVES, "CurvesView._draw_png: the curves, in a thread of their own (kwnb/notebook/curves_view.py)"),
]
WRAPPED = [(hook.module, hook.owner, hook.name, label) for hook, label in KERNEL_FUNCTIONS]


def kernel_components(cfg, kernel, workdir: Path, errors: list[str]) -> dict:
    """One instrumented kwnb run of the training job in the kernel: thread CPU seconds per function."""
    from .bringup import train_args
    from .common import job
    from .kernel import run_job

    from .common import WRITER

    # The smoke run profiles the writer (no TensorFlow start) only to keep this code path working.
    script, n, args = (WRITER, 1, ["bulk", "10000"]) if cfg.smoke else (job(cfg), cfg.n, train_args(cfg))
    kernel.execute(KERNEL_HOOK % (WRAPPED,))
    try:
        result = run_job(kernel, "kwnb", script, n, args, "profiled", workdir / "kprofile", probe=False)
    except Exception as error:  # noqa: BLE001
        errors.append(f"kernel profile: {type(error).__name__}: {error}")
        result = {"ok": False}
    finally:
        functions = json.loads(kernel.execute(KERNEL_UNHOOK).strip().splitlines()[-1])
    log(f"kernel profile: {result.get('kernel_cpu_s')} s kernel CPU over {result.get('run_s')} s")
    return {"workers": n, "script": Path(script).name, "args": args, "kernel_cpu_s": result.get("kernel_cpu_s"), "run_s": result.get("run_s"),
            "functions": {label: {"cpu_s": cpu, "calls": calls} for label, (cpu, calls) in functions.items()}}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def kernel_findings(data: dict) -> list[str]:
    if not data or not data.get("kernel_cpu_s"):
        return []
    total = data["kernel_cpu_s"]
    order = [label for _, label in KERNEL_FUNCTIONS]
    parts = "; ".join(f"{label.strip()} {data['functions'][label]['cpu_s']:.2f} s ({_count(data['functions'][label]['calls'], 'call')})"
                      for label in order if label in data["functions"])
    return [f"Kernel CPU by function in one instrumented kwnb run ({_count(data['workers'], 'worker')}, {data['script']} "
            f"{' '.join(data['args'])}, dashboard displayed): {total:.2f} s of kernel CPU over {data['run_s']:.1f} s. "
            f"Thread CPU per function (nested: the supervisor contains Worker._poll, which contains the next ones): {parts}."]


BEFORE = "curves: new figure + savefig per redraw (before)"
APPLY_BEFORE = "import benchmarks.patches as _p; _p.apply_curves_before(); print('applied')"
UNDO_BEFORE = "import benchmarks.patches as _p; _p.undo_curves_before(); print('undone')"


def kernel_ab(cfg, kernel, workdir: Path, errors: list[str]) -> list[dict]:
    """The training job from the kernel with the dashboard, kwnb as is against the dashboard's curves
    drawn as before LiveCurves (benchmarks/patches.py, applied in the kernel), alternating."""
    from .bringup import train_args
    from .common import job, read_markers, steps_per_second
    from .kernel import run_job

    script, n, args = job(cfg), cfg.n, train_args(cfg)
    samples = []
    for r in range(cfg.rounds):
        for variant in (("as is", "before") if r % 2 == 0 else ("before", "as is")):
            log(f"kernel experiment round {r + 1}/{cfg.rounds}: kwnb {variant}")
            result = {"round": r, "variant": variant}
            try:
                if variant != "as is":
                    kernel.execute(APPLY_BEFORE)
                try:
                    result.update(run_job(kernel, "kwnb", script, n, args, "ab", workdir / "ab", probe=False))
                finally:
                    if variant != "as is":
                        kernel.execute(UNDO_BEFORE)
                result["steps_per_s"] = steps_per_second(read_markers(result["logs"][0]), cfg.mark_a, cfg.mark_b)
            except Exception as error:  # noqa: BLE001
                result.update(ok=False, error=f"{type(error).__name__}: {error}")
                errors.append(f"kernel experiment round {r + 1} {variant}: {result['error']}")
            samples.append(result)
    return samples


def kernel_ab_rows(samples: list[dict], cfg) -> list[dict]:
    section = "5. experiment, real kernel + dashboard"
    described = f"{cfg.job}, {cfg.n} workers, {cfg.steps} steps"
    out = []

    def pick(variant, key):
        return [s.get(key) if s.get("ok") else None
                for s in sorted((s for s in samples if s["variant"] == variant), key=lambda s: s["round"])]

    before, now = pick("before", "kernel_cpu_s"), pick("as is", "kernel_cpu_s")
    metric = f"kernel CPU s over one run ({described})"
    out.append(row(section, metric, "kwnb as is", now, "s"))
    out.append(row(section, metric, f"kwnb, {BEFORE}", before, "s"))
    out.append(row(section, metric, "as is / before", paired_ratios(now, before), "ratio"))
    out.append(row(section, "chief steps per second", "as is / before",
                   paired_ratios(pick("as is", "steps_per_s"), pick("before", "steps_per_s")), "ratio"))
    flags = [s["port_open_at_set"] for s in samples if s.get("ok") and s.get("port_open_at_set")]
    if flags:
        out.append(row(section, "share of workers whose Worker.port_open_at was set", "kwnb (both variants)",
                       [sum(f) / len(f) for f in flags], "x"))
    return out
