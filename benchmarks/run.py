"""Run kwnb's benchmarks and write the results table (Markdown and JSON) with the machine it ran on.

    python -m benchmarks.run                  # full: 5 rounds (10 for throughput), about 30 minutes on 2 cores
    python -m benchmarks.run --smoke          # one round, small sizes (CI checks it keeps working)
    python -m benchmarks.run --rounds 7 --out /tmp/bench --sections bringup,logpath
    python -m benchmarks.run --retable benchmarks/results/latest.json   # the table again, measuring nothing

Writes OUT/latest.md and OUT/latest.json (OUT: benchmarks/results, or benchmarks/results/smoke
for --smoke); workers' logs and run folders go to OUT/raw/ (not kept in git).
Sections: bringup (1), throughput (2), logpath (3), scaling (4), profile (5), rerun (6), kernelcost (7),
threads (8), firstcell (9). See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/run.py` as well as `python -m benchmarks.run`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"

from benchmarks import bringup, firstcell, kernelcost, logpath, profile, rerun, scaling, threads, throughput  # noqa: E402
from benchmarks.common import ROOT, SECTIONS, LoadSampler, log, machine_info, write_results  # noqa: E402


@dataclass
class Config:
    smoke: bool = False
    rounds: int = 5
    throughput_rounds: int = 10  # a 2 % target needs more samples than bring-up's 5 % one
    seed: int = 0  # of the shuffled method order in each round
    n: int = 2  # workers of the training job
    job: str = "train.py"  # the training job, in benchmarks/workloads/ (--smoke: standin.py, no TensorFlow)
    bringup_steps: int = 30  # section 1 needs the first step only
    steps: int = 1000  # training steps of the throughput job
    mark_a: int = 10  # throughput is measured between these two steps (startup excluded)
    mark_b: int = 960  # ~11 s at ~85 steps/s: a 150-step window (1.8 s) left a ±10 % spread between runs
    tutorial_sleep: float = 10.0  # the tutorials' time.sleep(10) between worker 0 and worker 1
    floor_import: str = "tensorflow"  # section 1's floor: `python -c "import <this>"`, once per worker, at once
    pause: float = 0.5  # between two methods, so one's exit does not overlap the next one's start
    log_sizes: list = field(default_factory=lambda: [10_000, 100_000, 1_000_000])
    log_timeout: float = 300.0
    latency_rate: float = 20.0
    latency_seconds: float = 6.0
    scaling_sizes: list = field(default_factory=lambda: [1, 2, 4, 8])
    scaling_rounds: int = 5
    scaling_steps: int = 5
    task_counts: list = field(default_factory=lambda: [4, 16, 64])  # section 7's light tasks
    idle_sizes: list = field(default_factory=lambda: [2, 8])
    idle_seconds: float = 2.0
    parse_lines: int = 200_000
    rerun_host: bool = True  # section 6 also runs kwnb warm with network="host", in rounds of its own
    refill_timeout: float = 180.0  # section 6's wait for the pool (two imports on a loaded machine: ~5-15 s)
    thread_rounds: int = 5  # section 8: 2 workers in a 1-CPU cgroup, kwnb's thread variables or TF's defaults
    thread_steps: int = 400
    thread_mark_a: int = 10
    thread_mark_b: int = 360
    thread_methods: list = field(default_factory=lambda: list(threads.METHODS))
    firstcell_rounds: int = 5  # section 9: a fresh kernel per method and round
    reading_seconds: float = 15.0  # section 9: between %load_ext and the first cell
    firstcell_methods: list = field(default_factory=lambda: list(firstcell.METHODS))
    sections: list = field(default_factory=lambda: list(SECTIONS))
    note: str = ""
    command: str = ""


def smoke_config() -> Config:
    """Every code path once, small: a check that the benchmarks still work, not a measurement.

    Every method runs train.py's stand-in (workloads/standin.py: its markers and progress lines, each
    task's port, the tasks' wait for each other; no TensorFlow): about 25 starts of TensorFlow workers,
    3-5 s each on 2 cores, were most of the 4-5 minutes the smoke run took. Section 1's import floor
    imports the stand-in's modules: two `import tensorflow` at once took 6 s on a quiet machine (12 s at
    load 3) of a 72-83 s smoke run, and train.py's own test imports TensorFlow under the workers'
    environment. TensorFlow is left in section 9's pool (`%load_ext kwnb` prepares it before any script is
    known). Nothing waits that need not: the tutorial method sleeps 0.5 s (the stand-in listens ~0.1 s
    after its start), no reading time before section 9's cell (its kwnb cell then starts before the pool
    is ready, cold: the row says how many tasks started warm), section 2 reads section 1's runs of its 4
    methods (the same job here: throughput.same_job_as_bringup), section 8's 1-CPU runs train 12 steps,
    idle workers sleep 0.5 s. Two variants that run a section's code again with other settings are left
    out: section 8's emulated 64-core node (TensorFlow's defaults with 3 variables set: 2 more starts in
    1 CPU) and section 9's "quiet check off" (with no reading time, the pool's quiet check has nothing to
    change).
    """
    return Config(smoke=True, job="standin.py", rounds=1, throughput_rounds=1, bringup_steps=12, steps=12,
                  mark_a=2, mark_b=12, tutorial_sleep=0.5, floor_import="argparse, json, os, socket, threading",
                  pause=0.0,
                  log_sizes=[1_000, 10_000], log_timeout=60.0, latency_rate=20.0, latency_seconds=1.5,
                  scaling_sizes=[1], scaling_rounds=1, scaling_steps=3, task_counts=[4], idle_sizes=[2], idle_seconds=0.5,
                  parse_lines=20_000, thread_rounds=1, thread_steps=12, thread_mark_a=2, thread_mark_b=10,
                  thread_methods=["kwnb threads", "TF defaults"],
                  firstcell_rounds=1, reading_seconds=0.0, firstcell_methods=["kwnb first cell", "bare"])


def parse_args(argv: list[str] | None = None) -> tuple[Config, Path, bool, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one round, small sizes (what CI runs)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every comparison (default 5, twice that for throughput; 1 with --smoke)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for latest.md / latest.json (default benchmarks/results, or benchmarks/results/smoke)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--tutorial-sleep", type=float, default=None, help="seconds the tutorial method sleeps (default 10)")
    parser.add_argument("--note", default="", help="a sentence printed at the top of the table (e.g. 'machine shared')")
    parser.add_argument("--keep-raw", action="store_true", help="keep workers' logs in OUT/raw (default: delete them)")
    parser.add_argument("--retable", type=Path, default=None, metavar="LATEST_JSON",
                        help="measure nothing: redo the table of a finished run from the raw samples in its JSON")
    args = parser.parse_args(argv)
    cfg = smoke_config() if args.smoke else Config()
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        cfg.rounds = cfg.scaling_rounds = args.rounds
        cfg.throughput_rounds = args.rounds if cfg.smoke else 2 * args.rounds
        cfg.thread_rounds = cfg.firstcell_rounds = args.rounds
    if args.tutorial_sleep is not None:
        cfg.tutorial_sleep = args.tutorial_sleep
    cfg.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(cfg.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    cfg.note = args.note
    cfg.command = "python -m benchmarks.run " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    out = args.out or (ROOT / "benchmarks" / "results" / ("smoke" if cfg.smoke else ""))
    return cfg, out.resolve(), args.keep_raw, args.retable


def main(argv: list[str] | None = None) -> int:
    cfg, out, keep_raw, retable_json = parse_args(argv)
    if retable_json is not None:
        return retable(retable_json)
    started = time.time()
    machine = machine_info()
    errors: list[str] = []
    raw: dict = {}
    seconds: dict[str, float] = {}  # wall seconds per section: where a run's (and CI's smoke run's) time goes
    out.mkdir(parents=True, exist_ok=True)
    if keep_raw:
        workdir = out / "raw" / time.strftime("%Y%m%d-%H%M%S")
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="kwnb-bench-"))
    log(f"writing to {out}; raw logs in {workdir}")
    # Workers of every method get this process's environment: none of them should see a GPU or
    # the caller's TF_CONFIG.
    os.environ.pop("TF_CONFIG", None)
    # Sections 1-5 compare kwnb's launch with bare Popen's: cold starts (a pool refilling after a kwnb
    # run would import TensorFlow twice beside the next method) on the host network (the port probe is
    # outside any private one). Section 6 measures warm re-runs on kwnb's own default network (rerun.py).
    os.environ.setdefault("KWNB_WARM", "0")
    os.environ.setdefault("KWNB_NETWORK", "host")
    try:
        with LoadSampler() as load:
            kernel = None
            if set(SECTIONS) & set(cfg.sections):
                from benchmarks.kernel import SETUP, Kernel

                kernel_dir = workdir / "kernel"
                kernel_dir.mkdir(parents=True, exist_ok=True)
                log("starting a kernel")
                kernel = Kernel(kernel_dir)
                kernel.execute(SETUP)
            try:
                measures = {"bringup": lambda: bringup.measure(cfg, workdir / "bringup", errors, kernel),
                            "throughput": lambda: throughput.measure(cfg, workdir / "throughput", errors, kernel,
                                                                        raw.get("bringup")),
                            "logpath": lambda: logpath.measure(cfg, kernel, kernel_dir, errors),
                            "scaling": lambda: scaling.measure(cfg, kernel, kernel_dir, errors),
                            "rerun": lambda: rerun.measure(cfg, workdir / "rerun", errors, kernel),
                            "kernelcost": lambda: kernelcost.measure(cfg, kernel, kernel_dir, errors),
                            "threads": lambda: threads.measure(cfg, workdir / "threads", errors),
                            "firstcell": lambda: firstcell.measure(cfg, workdir / "firstcell", errors)}
                for name in ("bringup", "throughput", "logpath", "scaling", "rerun", "kernelcost", "threads", "firstcell"):
                    if name in cfg.sections:
                        raw[name] = _timed(seconds, name, measures[name])
                if "profile" in cfg.sections:
                    raw["kernel_ab"] = _timed(seconds, "profile", lambda: profile.kernel_ab(cfg, kernel, kernel_dir, errors))
                    raw["kernel_profile"] = _timed(seconds, "profile", lambda: profile.kernel_components(
                        cfg, kernel, kernel_dir, errors))
            finally:
                if kernel is not None:
                    kernel.close()
            if "profile" in cfg.sections:
                raw["profile"] = _timed(seconds, "profile", lambda: {
                    "supervisor": profile.supervisor(cfg, workdir / "profile", errors),
                    "parsing": profile.parsing(cfg, errors)})
    finally:
        if not keep_raw:
            shutil.rmtree(workdir, ignore_errors=True)
    raw = _strip(raw)
    rows, findings = tabulate(raw, cfg)
    results = {
        "schema": 1,
        "machine": machine,
        "config": asdict(cfg),
        "wall_seconds": time.time() - started,
        "section_seconds": {name: round(seconds[name], 1) for name in SECTIONS if name in seconds},
        "load": load.summary(),
        "load_average_at_end": list(os.getloadavg()),
        "rows": rows,
        "findings": findings,
        "errors": errors,
        "raw": raw,
    }
    json_path, md_path = write_results(results, out)
    log(f"wrote {md_path} and {json_path} in {results['wall_seconds']:.0f} s; by section: "
        + ", ".join(f"{name} {s:.0f} s" for name, s in results["section_seconds"].items()))
    print(md_path.read_text())
    return 0


def _timed(seconds: dict[str, float], name: str, measure):
    """measure(), its wall seconds added to seconds[name] (section 5 is measured in three parts)."""
    began = time.monotonic()
    try:
        return measure()
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - began


def tabulate(raw: dict, cfg) -> tuple[list[dict], list[str]]:
    """The table's rows and the findings, from the raw samples alone (so --retable can redo them)."""
    rows: list[dict] = []
    findings: list[str] = []
    for name, module in (("bringup", bringup), ("throughput", throughput), ("logpath", logpath),
                         ("scaling", scaling), ("kernelcost", kernelcost)):
        if name in raw:
            extra = (raw.get("throughput"),) if name == "bringup" else ()
            section_rows, section_findings = module.rows(raw[name], cfg, *extra)
            rows += section_rows
            findings += section_findings
    if "kernel_profile" in raw:
        findings += profile.kernel_findings(raw["kernel_profile"])
    if "profile" in raw:
        section_rows, section_findings = profile.rows(raw["profile"]["supervisor"], raw["profile"]["parsing"], cfg)
        rows += section_rows
        findings += section_findings
    if "kernel_ab" in raw:
        rows += profile.kernel_ab_rows(raw["kernel_ab"], cfg)
    for name, module in (("rerun", rerun), ("threads", threads), ("firstcell", firstcell)):
        if name in raw:
            section_rows, section_findings = module.rows(raw[name], cfg)
            rows += section_rows
            findings += section_findings
    return rows, findings


def retable(path: Path) -> int:
    """Rewrite latest.md and the rows of latest.json from the raw samples a run kept, measuring nothing."""
    results = json.loads(path.read_text())
    cfg = Config(**results["config"])
    results["rows"], results["findings"] = tabulate(results["raw"], cfg)
    json_path, md_path = write_results(results, path.parent)
    log(f"rewrote {md_path} and {json_path} from the raw samples of {results['machine']['date']}")
    return 0


def _strip(value):
    """Raw samples for the JSON, without the per-line latency lists' full precision noise."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


if __name__ == "__main__":
    sys.exit(main())
