"""No false alarms under load (issue 20, item 6): six learners on one 2-core workshop server, each running a
2-worker cell twice with kwnb's defaults, all at once. Every run must finish with exit codes [0, 0] and raise
no diagnosis except `waiting_for_peers` where a peer really was late (joined more than 10 s after the other).

Each learner is a process of its own, as a notebook kernel is: it calls `kwnb.launch` (defaults: stall_after
60 s, on_failure "stop") on benchmarks/workloads/train.py, waits, and launches again. While a run goes, the
learner looks every 0.5 s at how long each live task has been silent (no output), to show the margin left to
`stall_after`. Not part of benchmarks/run.py's sections: it measures diagnoses, not speed.

    .venv/bin/python -m benchmarks.load [--learners 6] [--runs 2] [--steps 40] [--out benchmarks/results/load]

Writes OUT/latest.json (every run: exit codes, elapsed, each task's join time and longest silence, every
diagnosis ever made) and OUT/latest.md (the table docs/diagnoses.md quotes), and exits 1 if any run broke the rule.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, TRAIN

LEARNER = r'''
import json, sys, time
import kwnb
runs, steps, folder = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for attempt in range(runs):
    run = kwnb.launch(sys.argv[4], n=2, name=f"cell{attempt}", args=f"--steps {steps}", runs_dir=folder, cwd=folder)
    silence = [0.0, 0.0]
    while not run.done:
        now = time.time()
        for task in run.workers:
            if task.alive and task.signals.connected_at:  # once joined: the import is the start's business
                silence[task.position] = max(silence[task.position], now - task.signals.progress_at)
        time.sleep(0.5)
    joined = [t.signals.connected_at - run.started_at if t.signals.connected_at else None for t in run.workers]
    print(json.dumps({"attempt": attempt, "exit_codes": run.exit_codes, "elapsed": round(run.elapsed, 1),
                      "joined_s": joined, "longest_silence_s": [round(s, 1) for s in silence],
                      "stall_after": run.stall_after,
                      "diagnoses": [{"kind": d.kind, "task": d.task, "since_s": round(d.since - run.started_at, 1),
                                     "message": d.message} for d in run.diagnosis_history]}), flush=True)
'''
LATE_SECONDS = 10.0  # kwnb's WAIT_SECONDS: a join this much later than the other task's is a late peer


def verdict(result: dict) -> list[str]:
    """What this run did wrong, in words (empty: it kept the rule)."""
    problems = []
    if result["exit_codes"] != [0, 0]:
        problems.append(f"exit codes {result['exit_codes']}")
    joined = [j for j in result["joined_s"] if j is not None]
    late = len(joined) == 2 and abs(joined[0] - joined[1]) > LATE_SECONDS - 1
    for diagnosis in result["diagnoses"]:
        if diagnosis["kind"] != "waiting_for_peers" or not late:
            problems.append(f"{diagnosis['kind']} (task {diagnosis['task']}): {diagnosis['message']}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    started, load_before = time.time(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kwnb-load-") as scratch:
        learners = []
        for number in range(args.learners):
            folder = Path(scratch) / f"learner{number}"
            folder.mkdir()
            learners.append(subprocess.Popen(
                [sys.executable, "-c", LEARNER, str(args.runs), str(args.steps), str(folder), str(TRAIN)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        results = []
        for number, learner in enumerate(learners):
            out, _ = learner.communicate(timeout=1800)
            results += [{"learner": number, **json.loads(line)} for line in out.splitlines() if line.startswith("{")]
    report = {"learners": args.learners, "runs_each": args.runs, "steps": args.steps, "cpus": os.cpu_count(),
              "load_before": load_before, "wall_s": round(time.time() - started, 1), "results": results,
              "problems": {f"{r['learner']}.{r['attempt']}": verdict(r) for r in results if verdict(r)}}
    (args.out / "latest.json").write_text(json.dumps(report, indent=1))
    (args.out / "latest.md").write_text(table(report))
    print(table(report))
    return 0 if not report["problems"] and len(results) == args.learners * args.runs else 1


def table(report: dict) -> str:
    rows = ["| learner.run | exit codes | elapsed s | joined s (w0, w1) | longest silence s (w0, w1) | diagnoses |",
            "| --- | --- | --- | --- | --- | --- |"]
    for r in report["results"]:
        joined = ", ".join("-" if j is None else f"{j:.1f}" for j in r["joined_s"])
        said = "; ".join(f"{d['kind']} ({d['since_s']} s)" for d in r["diagnoses"]) or "none"
        rows.append(f"| {r['learner']}.{r['attempt']} | {r['exit_codes']} | {r['elapsed']} | {joined} | "
                    f"{', '.join(map(str, r['longest_silence_s']))} | {said} |")
    head = (f"{report['learners']} learners x {report['runs_each']} runs of a 2-worker cell ({report['steps']} steps), "
            f"all at once on {report['cpus']} CPUs (load average before: {report['load_before'][0]:.1f}); "
            f"{report['wall_s']} s in all. Problems: {report['problems'] or 'none'}\n\n")
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.exit(main())
