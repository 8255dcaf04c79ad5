"""No false alarms under load (issue 20, item 6): six learners on one 2-core workshop server, each running a
2-worker cell twice with kwnb's defaults, all at once. Every run must finish with exit codes [0, 0] and raise
no diagnosis except `waiting_for_peers` where a peer really was late (joined more than 10 s after the other).

Each learner is a process of its own, as a notebook kernel is: it calls `kwnb.launch` (defaults: stall_after
60 s, on_failure "stop") on benchmarks/workloads/train.py, waits, and launches again. While a run goes, the
learner looks every 0.5 s at how long each live task has been silent (no output), to show the margin left to
`stall_after`. Not part of benchmarks/run.py's sections: it measures diagnoses, not speed.

With --hub (root, jupyterhub and configurable-http-proxy: tests/hub_support.py), each learner is a Unix user
of a private JupyterHub on loopback, in cgroups of --cpu-limit CPUs and --mem-limit (the config
docs/organiser.md explains), and each run is one cell executed in that learner's kernel through the hub's
proxy, as JupyterLab sends it; all learners send their first cell at once, once every server is up.
"First step" is from the cell's execute request (--hub) or `kwnb.launch` (without) to the chief's first step.

    .venv/bin/python -m benchmarks.load [--learners 6] [--runs 2] [--steps 40] [--out benchmarks/results/load]
                                        [--hub [--cpu-limit 1] [--mem-limit 2G]]

Writes OUT/latest.json (every run: exit codes, elapsed, each task's join time and longest silence, every
diagnosis ever made) and OUT/latest.md (the table docs/diagnoses.md quotes), and exits 1 if any run broke the rule.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import ROOT, TRAIN

ONE_RUN = r'''
import json, re, time
import kwnb

def one_run(attempt, steps, folder, script):
    launched_at = time.time()
    run = kwnb.launch(script, n=2, name=f"cell{attempt}", args=f"--steps {steps}", runs_dir=folder, cwd=folder)
    silence = [0.0, 0.0]
    while not run.done:
        now = time.time()
        for task in run.workers:
            if task.alive and task.signals.connected_at:  # once joined: the import is the start's business
                silence[task.position] = max(silence[task.position], now - task.signals.progress_at)
        time.sleep(0.5)
    joined = [t.signals.connected_at - run.started_at if t.signals.connected_at else None for t in run.workers]
    first = re.search(r"BENCH step 1 (\S+)", run.workers[0].log_path.read_text(errors="replace"))
    print(json.dumps({"attempt": attempt, "exit_codes": run.exit_codes, "elapsed": round(run.elapsed, 1),
                      "joined_s": joined, "longest_silence_s": [round(s, 1) for s in silence],
                      "stall_after": run.settings.stall_after, "launched_at": launched_at,
                      "first_step_at": float(first.group(1)) if first else None,
                      "diagnoses": [{"kind": d.kind, "task": d.task, "since_s": round(d.since - run.started_at, 1),
                                     "message": d.message} for d in run.diagnosis_history]}), flush=True)
'''
LEARNER = ONE_RUN + r'''
import sys
for attempt in range(int(sys.argv[1])):
    one_run(attempt, int(sys.argv[2]), sys.argv[3], sys.argv[4])
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
    parser.add_argument("--hub", action="store_true", help="each learner a user of a private JupyterHub")
    parser.add_argument("--cpu-limit", type=float, default=1, help="each hub learner's CPUs (cgroup)")
    parser.add_argument("--mem-limit", default="2G", help="each hub learner's memory (cgroup)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    started, load_before = time.time(), os.getloadavg()
    results = through_hub(args) if args.hub else as_processes(args)
    report = {"learners": args.learners, "runs_each": args.runs, "steps": args.steps, "cpus": os.cpu_count(),
              "hub": f"JupyterHub, {args.cpu_limit:g} CPU and {args.mem_limit} a learner" if args.hub else None,
              "load_before": load_before, "load_after": os.getloadavg(), "wall_s": round(time.time() - started, 1),
              "results": results,
              "problems": {f"{r['learner']}.{r['attempt']}": verdict(r) for r in results if verdict(r)}}
    (args.out / "latest.json").write_text(json.dumps(report, indent=1))
    (args.out / "latest.md").write_text(table(report))
    print(table(report))
    return 0 if not report["problems"] and len(results) == args.learners * args.runs else 1


def as_processes(args) -> list[dict]:
    """Each learner a Python process of its own; first step counted from its `kwnb.launch`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
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
            for line in out.splitlines():
                if line.startswith("{"):
                    result = json.loads(line)
                    results.append({"learner": number, **result, "first_step_s": _since(result, "launched_at")})
    return results


def through_hub(args) -> list[dict]:
    """Each learner a hub user whose kernel runs one cell a run; first step counted from the cell's request."""
    sys.path.insert(0, str(ROOT / "tests"))
    import hub_support
    from hub_kernel import NotebookSession

    hub = hub_support.start(args.learners, mem_limit=args.mem_limit, cpu_limit=args.cpu_limit)
    ready, results = threading.Barrier(args.learners, timeout=600), []

    def learner(number: int, user) -> None:
        session = NotebookSession(hub.start_server(user.name, timeout=600), hub.user_token(user.name),
                                  "load.ipynb", [ONE_RUN])
        session.execute(ONE_RUN, timeout=600)
        ready.wait()  # every learner's first cell at once
        for attempt in range(args.runs):
            cell = session.execute(f"one_run({attempt}, {args.steps}, {str(user.home)!r}, {str(TRAIN)!r})", 1800)
            for line in cell.stdout.splitlines():
                if line.startswith("{"):
                    result = {**json.loads(line), "sent_at": cell.sent_at}
                    results.append({"learner": number, **result, "first_step_s": _since(result, "sent_at")})
        session.close()

    try:
        threads = [threading.Thread(target=learner, args=pair) for pair in enumerate(hub.learners)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(3600)
    finally:
        for number, user in enumerate(hub.learners):  # the runs' logs, as evidence: the homes go with the accounts
            for run in user.home.glob("cell*-*"):
                shutil.copytree(run, args.out / "runs" / f"learner{number}" / run.name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("*.png", "*.py"))
        hub.stop()
    return sorted(results, key=lambda r: (r["learner"], r["attempt"]))


def _since(result: dict, start: str) -> float | None:
    return round(result["first_step_at"] - result[start], 1) if result.get("first_step_at") else None


def table(report: dict) -> str:
    rows = ["| learner.run | exit codes | elapsed s | first step s | joined s (w0, w1) | longest silence s (w0, w1) "
            "| diagnoses |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["results"]:
        joined = ", ".join("-" if j is None else f"{j:.1f}" for j in r["joined_s"])
        said = "; ".join(f"{d['kind']} ({d['since_s']} s)" for d in r["diagnoses"]) or "none"
        rows.append(f"| {r['learner']}.{r['attempt']} | {r['exit_codes']} | {r['elapsed']} | {r.get('first_step_s')} | "
                    f"{joined} | {', '.join(map(str, r['longest_silence_s']))} | {said} |")
    firsts = sorted(r["first_step_s"] for r in report["results"] if r["attempt"] == 0 and r.get("first_step_s"))
    head = (f"{report['learners']} learners x {report['runs_each']} runs of a 2-worker cell ({report['steps']} steps), "
            f"all at once on {report['cpus']} CPUs{' through a ' + report['hub'] if report.get('hub') else ''} "
            f"(load average before: {report['load_before'][0]:.1f}); {report['wall_s']} s in all. "
            f"First runs' first step: median {statistics.median(firsts) if firsts else '-'} s, "
            f"{firsts[0] if firsts else '-'} to {firsts[-1] if firsts else '-'} s. "
            f"Problems: {report['problems'] or 'none'}\n\n")
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.exit(main())
