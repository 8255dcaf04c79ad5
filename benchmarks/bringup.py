"""Sections 1 and 2: bring-up and training throughput of one 2-worker job, started six ways, and
the floor of importing TensorFlow.

  kwnb         kwnb.launch(train.py, n=2) + display(run) in a real Jupyter kernel: what a notebook
               user gets, the dashboard thread redrawing log tabs and curves while it trains
  kwnb.launch  kwnb.launch(train.py, n=2) from this process, no dashboard (the Python API alone;
               its supervisor thread runs in this process)
  bare         subprocess.Popen per worker with hand-made TF_CONFIGs, as a user would write it
  bare session the same with start_new_session=True, as kwnb started its workers until 17f1648
               (reported, no target). On Linux the scheduler shares the CPU between sessions first
               (autogroups), so workers in sessions of their own are scheduled differently from
               workers sharing their parent's session, as kwnb's now do: plain bare is the baseline.
  tutorial     TensorFlow's tutorial recipe: write main.py, `bash -c "python main.py &> job_0.log"`
               in the background, time.sleep(10), then worker 1 in the foreground
  ipyparallel  ipp.Cluster(n=2); each engine sets os.environ (TF_CONFIG, ...) and then runs the
               same script's source (TensorFlow is imported only then)
  import_tf    `python -c "import tensorflow"`, as many at once as the job has workers: the
               physical floor of any worker's start (--smoke: the stand-in's imports, cfg.floor_import)
  bare again   bare run a second time in each round: the A/A pair

Times are from the launch call (t0, taken just before the method's first action) to
  ports: every worker's port accepts a TCP connection (probed every 20 ms, the same probe for all)
  first step: the chief's `BENCH step 1 T` marker (T is the chief's own clock)
Throughput is the chief's steps per second between its `step A` and `step B` markers.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import portpicker

import kwnb.api  # noqa: F401 - imported up front, as `%load_ext kwnb` does in a notebook

from .common import (WORKER_ENV, PortProbe, job, log, paired_ratios, parse_markers, probe_hello, read_markers,
                     row, since, steps_per_second, check, wait_pids_gone)

METHODS = ("kwnb", "bare", "kwnb.launch", "bare session", "tutorial", "ipyparallel", "import_tf", "bare again")
# "bare again" is bare run a second time in each round: the A/A pair that shows how far a
# ratio strays from 1 by noise alone on this machine, to read the kwnb / bare ratios against.
RUN_TIMEOUT = 300.0


def _cluster(n: int) -> tuple[list[str], list[str]]:
    addresses = [f"localhost:{portpicker.pick_unused_port()}" for _ in range(n)]
    configs = [json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": i}}) for i in range(n)]
    return addresses, configs


def _env(tf_config: str | None = None) -> dict:
    env = dict(os.environ, **WORKER_ENV)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return env


def _result(t0: float, probe: PortProbe | None, chief: dict, cfg, ended: float, codes: list, **extra) -> dict:
    steps = chief.get("steps", {})
    return {
        "ok": all(c == 0 for c in codes),
        "exit_codes": codes,
        "ports_s": since(t0, probe.all_open_at()) if probe else None,
        "port_each_s": [since(t0, probe.open_at.get(a)) for a in probe.addresses] if probe else None,
        "probe_late": bool(probe.already_open) if probe else False,
        "start_s": since(t0, chief.get("start")),
        "imported_s": since(t0, chief.get("imported")),
        "first_step_s": since(t0, steps.get(1)),
        "steps_per_s": steps_per_second(chief, cfg.mark_a, cfg.mark_b),
        "total_s": ended - t0,
        **extra,
    }


def short_job(cfg):
    """The configuration of the short job (bringup_steps steps): sections 1 and 9 time a start, not training."""
    return dataclasses.replace(cfg, steps=cfg.bringup_steps, mark_a=min(cfg.mark_a, cfg.bringup_steps),
                               mark_b=cfg.bringup_steps)


def train_args(cfg) -> list[str]:
    return ["--steps", str(cfg.steps), "--mark-a", str(cfg.mark_a), "--mark-b", str(cfg.mark_b)]


# ----- the methods -----------------------------------------------------------------------------
def run_kwnb_kernel(cfg, workdir: Path, kernel) -> dict:
    from .kernel import run_job

    result = run_job(kernel, "kwnb", job(cfg), cfg.n, train_args(cfg), "bench", workdir / "kernel", timeout=RUN_TIMEOUT)
    t0 = result["t0"]
    chief = read_markers(result["logs"][0])
    steps = chief.get("steps", {})
    result.update(start_s=since(t0, chief.get("start")), imported_s=since(t0, chief.get("imported")),
                  first_step_s=since(t0, steps.get(1)), steps_per_s=steps_per_second(chief, cfg.mark_a, cfg.mark_b),
                  total_s=result["run_s"], log=result["logs"][0])
    return result


def run_kwnb(cfg, workdir: Path) -> dict:
    import kwnb

    t0 = time.time()
    run = kwnb.launch(job(cfg), n=cfg.n, name="bench", runs_dir=workdir / "kwnb-runs", args=train_args(cfg))
    probe = PortProbe([w.address for w in run.workers], hello=probe_hello(job(cfg))).start()
    codes = run.wait(RUN_TIMEOUT)
    waited = time.time()  # wait() returned: what a script, %kw_wait and --wait wait for (issue 31)
    if not run.done:
        run.stop("benchmark timeout")
        codes = run.exit_codes
    probe.stop()
    chief = read_markers(run.workers[0].log_path)
    return _result(t0, probe, chief, cfg, run.ended_at or time.time(), codes,
                   kwnb_port_open_at_set=[w.port_open_at is not None for w in run.workers],
                   kwnb_port_open_s=[since(t0, w.port_open_at) for w in run.workers],
                   wait_s=waited - t0,
                   log=str(run.workers[0].log_path))


def run_bare_session(cfg, workdir: Path) -> dict:
    return run_bare(cfg, workdir, new_session=True)


def run_bare(cfg, workdir: Path, new_session: bool = False) -> dict:
    folder = workdir / f"bare-{time.time_ns()}"
    folder.mkdir(parents=True)
    t0 = time.time()
    addresses, configs = _cluster(cfg.n)
    procs = []
    for i, config in enumerate(configs):
        with open(folder / f"worker-{i}.log", "wb") as out:
            procs.append(subprocess.Popen([sys.executable, str(job(cfg)), *train_args(cfg)], stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT, env=_env(config),
                                          start_new_session=new_session))
    probe = PortProbe(addresses, hello=probe_hello(job(cfg))).start()
    codes = _wait_all(procs)
    ended = time.time()
    probe.stop()
    return _result(t0, probe, read_markers(folder / "worker-0.log"), cfg, ended, codes, log=str(folder / "worker-0.log"))


def run_tutorial(cfg, workdir: Path) -> dict:
    """The recipe of TensorFlow's multi-worker tutorials, with free ports instead of 12345/23456."""
    folder = workdir / f"tutorial-{time.time_ns()}"
    folder.mkdir(parents=True)
    source = job(cfg).read_text()
    t0 = time.time()
    (folder / "main.py").write_text(source)  # %%writefile main.py
    addresses, configs = _cluster(cfg.n)
    command = f"{sys.executable} main.py {' '.join(train_args(cfg))}"
    background = []
    for i in range(cfg.n - 1):  # %%bash --bg: python main.py &> job_0.log
        background.append(subprocess.Popen(["bash", "-c", f"{command} &> job_{i}.log"], cwd=folder,
                                           stdin=subprocess.DEVNULL, env=_env(configs[i])))
    probe = PortProbe(addresses, hello=probe_hello(job(cfg))).start()
    time.sleep(cfg.tutorial_sleep)  # time.sleep(10): the tutorial's wait for worker 0
    last = cfg.n - 1  # %%bash: python main.py (the cell blocks until it ends)
    foreground = subprocess.Popen(["bash", "-c", f"{command} &> job_{last}.log"], cwd=folder,
                                  stdin=subprocess.DEVNULL, env=_env(configs[last]))
    codes = _wait_all([*background, foreground])
    ended = time.time()
    probe.stop()
    return _result(t0, probe, read_markers(folder / "job_0.log"), cfg, ended, codes,
                   sleep_s=cfg.tutorial_sleep, log=str(folder / "job_0.log"))


def _engine_train(tf_config: str, env: dict, source: str, argv: list, path: str) -> None:
    """Runs inside an ipyparallel engine: environment first, then the script (which imports TF)."""
    import os
    import sys

    os.environ.update(env)
    os.environ["TF_CONFIG"] = tf_config
    sys.argv = [path, *argv]
    exec(compile(source, path, "exec"), {"__name__": "__main__", "__file__": path})


def run_ipyparallel(cfg, workdir: Path) -> dict:
    import ipyparallel as ipp

    source = job(cfg).read_text()
    t0 = time.time()
    cluster = ipp.Cluster(n=cfg.n, log_level=logging.ERROR)
    try:
        client = cluster.start_and_connect_sync(activate=False)
        engines_up = time.time()
        addresses, configs = _cluster(cfg.n)
        probe = PortProbe(addresses, hello=probe_hello(job(cfg))).start()
        env = {k: v for k, v in WORKER_ENV.items()}
        results = [client[engine].apply_async(_engine_train, configs[i], env, source, train_args(cfg), str(job(cfg)))
                   for i, engine in enumerate(client.ids[: cfg.n])]
        codes = []
        for result in results:
            try:
                result.get(timeout=RUN_TIMEOUT)
                codes.append(0)
            except Exception as error:  # noqa: BLE001 - a failed engine is recorded, not fatal
                codes.append(f"{type(error).__name__}: {error}"[:300])
        ended = time.time()
        probe.stop()
        output = results[0].stdout or ""
        (workdir / f"ipyparallel-{time.time_ns()}.log").write_text(output)
        pids = [p["pid"] for p in client[:].apply_sync(_pid_info)] if all(c == 0 for c in codes) else []
        return _result(t0, probe, parse_markers(output), cfg, ended, codes, engines_up_s=engines_up - t0,
                       engine_pids=pids)
    finally:
        try:
            # After the measurement: TensorFlow catches SIGTERM in the engines, so ipyparallel's stop sent it,
            # waited its 5 s and then killed them (10 s a round here). Killed at once, as kwnb escalates.
            cluster.signal_engines_sync(signal.SIGKILL)
        except Exception as error:  # noqa: BLE001 - stop_cluster below still ends them
            log(f"ipyparallel: killing the engines failed: {error}")
        try:
            cluster.stop_cluster_sync()
        except Exception as error:  # noqa: BLE001
            log(f"ipyparallel: stopping the cluster failed: {error}")


def _pid_info() -> dict:
    import os

    return {"pid": os.getpid()}


def run_import_tf(cfg, workdir: Path) -> dict:
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", f"import {cfg.floor_import}"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env())
             for _ in range(cfg.n)]
    ends = []
    for proc in procs:
        proc.wait(RUN_TIMEOUT)
        ends.append(time.time())
    return {"ok": all(p.returncode == 0 for p in procs), "exit_codes": [p.returncode for p in procs],
            "import_s": max(ends) - t0, "import_each_s": [e - t0 for e in ends], "total_s": max(ends) - t0}


def _wait_all(procs: list[subprocess.Popen]) -> list:
    codes = []
    deadline = time.monotonic() + RUN_TIMEOUT
    for proc in procs:
        try:
            codes.append(proc.wait(max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(f"timeout after {RUN_TIMEOUT:g} s")
    return codes


RUNNERS = {"kwnb": run_kwnb_kernel, "kwnb.launch": run_kwnb, "bare": run_bare, "bare session": run_bare_session,
           "tutorial": run_tutorial, "ipyparallel": run_ipyparallel, "import_tf": run_import_tf,
           "bare again": run_bare}


def available_methods(kernel, wanted=METHODS) -> tuple[list[str], dict[str, str]]:
    skipped = {}
    if kernel is None and "kwnb" in wanted:
        skipped["kwnb"] = "no kernel (the kernel's own benchmark was not asked for)"
    if "ipyparallel" in wanted:
        try:
            import ipyparallel  # noqa: F401
        except ImportError:
            skipped["ipyparallel"] = "ipyparallel is not installed (pip install ipyparallel)"
    return [m for m in wanted if m not in skipped], skipped


@functools.cache
def warm_up() -> None:
    """One untimed `import tensorflow` per process, so the first timed method does not pay for a cold file cache."""
    subprocess.run([sys.executable, "-c", "import tensorflow"], env=_env(), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=RUN_TIMEOUT)


def measure(cfg, workdir: Path, errors: list[str], kernel=None) -> dict:
    """Section 1: every method once per round, running the short job (bring-up needs its first step)."""
    return measure_methods(short_job(cfg), workdir, errors, kernel, METHODS, cfg.rounds, "bring-up")


def measure_methods(cfg, workdir: Path, errors: list[str], kernel, wanted, rounds: int, what: str) -> dict:
    """Each method once per round, in a shuffled order: {method: [result per round]}.

    Shuffled (seeded: cfg.seed), not rotated: with a rotation each method always follows the same
    other one, and whatever a method leaves behind (exiting processes, a warm or cold cache) biased
    one pair of the comparison; the A/A pair showed it (bare after import_tf was 8 % slower).
    """
    methods, skipped = available_methods(kernel, wanted)
    samples: dict[str, list] = {m: [] for m in methods}
    shuffle = random.Random(f"{cfg.seed}-{what}").shuffle
    if not cfg.smoke:
        warm_up()
    for r in range(rounds):
        order = list(methods)
        shuffle(order)
        for position, method in enumerate(order):
            log(f"{what} round {r + 1}/{rounds}: {method}")
            try:
                runner = RUNNERS[method]
                result = runner(cfg, workdir, kernel) if method == "kwnb" else runner(cfg, workdir)
            except Exception as error:  # noqa: BLE001 - one broken method must not hide the others
                result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            result["round"], result["position"] = r, position
            if not result.get("ok"):
                errors.append(f"{what} round {r + 1} {method}: {result.get('error') or result.get('exit_codes')}")
            samples[method].append(result)
            wait_pids_gone(result.get("engine_pids", []))
            log(f"  -> " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()
                                     if k in ("ports_s", "first_step_s", "steps_per_s", "import_s") and v is not None))
            time.sleep(cfg.pause)
    return {"samples": samples, "skipped": skipped}


def _values(samples: dict, method: str, key: str) -> list:
    return [s.get(key) if s.get("ok") else None for s in samples.get(method, [])]


def method_labels(cfg) -> dict[str, str]:
    return {"kwnb": "kwnb in a kernel + dashboard", "kwnb.launch": "kwnb.launch (no dashboard)",
            "bare": "bare Popen", "bare session": "bare Popen (own session)", "tutorial": f"tutorial (sleep {cfg.tutorial_sleep:g} s)",
            "ipyparallel": f"ipyparallel Cluster(n={cfg.n})", "import_tf": f"python -c 'import {cfg.floor_import}' x{cfg.n}",
            "bare again": "bare Popen, run again (A/A)"}


def aa_row(section: str, metric: str, samples: dict, key: str, labels: dict) -> dict:
    """bare run again / bare: the noise floor to read every kwnb / bare ratio of the section against."""
    return row(section, metric, f"{labels['bare again']} / {labels['bare']}",
               paired_ratios(_values(samples, "bare again", key), _values(samples, "bare", key)),
               "ratio", note="A/A: the same launch twice per round; its spread is what noise alone "
                             "does to the kwnb / bare ratios")


def pooled(samples: dict, more: dict | None) -> dict:
    """Section 1's samples, followed by section 2's for the methods both ran.

    Section 2's runs start the same job the same way (only its step count differs, which nothing
    before the first step sees), so they are bring-up samples too: 15 rounds instead of 5 for
    kwnb / bare, whose runs differ by 10-15 % on a shared machine. Each method's list keeps section
    1's rounds first, so a ratio against a method only section 1 ran pairs section 1's rounds alone.
    A smoke run's section 2 reads section 1's own runs (throughput.same_job_as_bringup): not counted twice.
    """
    if (more or {}).get("from_bringup"):
        return samples
    more = (more or {}).get("samples", {})
    return {m: list(runs) + list(more.get(m, [])) if m in more else list(runs) for m, runs in samples.items()}


def rows(data: dict, cfg, throughput: dict | None = None) -> tuple[list[dict], list[str]]:
    samples = pooled(data["samples"], throughput)
    out, findings = [], []
    section = f"1. bring-up, {cfg.n} workers"
    labels = method_labels(cfg)
    mine = [m for m in ("kwnb", "kwnb.launch") if m in samples]
    others = [m for m in ("bare", "bare session", "tutorial", "ipyparallel") if m in samples]
    # Own-session bare is how kwnb started workers until 17f1648: its ratios are reported, not judged.
    targets = {"bare": "<= 1.05", "bare session": "", "tutorial": "< 1 (ahead)", "ipyparallel": "< 1 (ahead)"}
    if "import_tf" in samples:
        out.append(row(section, "all imports done (physical floor)", labels["import_tf"],
                       _values(samples, "import_tf", "import_s"), "s"))
    for key, metric in (("ports_s", "every worker's port accepts"), ("first_step_s", "chief's first step done")):
        for method in mine + others:
            out.append(row(section, metric, labels[method], _values(samples, method, key), "s"))
        for method in mine:
            values = _values(samples, method, key)
            for other in others:
                summary = row(section, metric, f"{labels[method]} / {labels[other]}",
                              paired_ratios(values, _values(samples, other, key)), "ratio", target=targets[other])
                median = summary["median"]
                if other == "bare":
                    summary["target_met"] = check(median, "<=", 1.05)
                elif other != "bare session":
                    summary["target_met"] = None if median is None else median < 1.0
                out.append(summary)
            if "import_tf" in samples:
                out.append(row(section, metric, f"{labels[method]} / {labels['import_tf']}",
                               paired_ratios(values, _values(samples, "import_tf", "import_s")), "ratio",
                               note="how far above the floor of importing TensorFlow"))
    for method in mine + others:
        out.append(row(section, "launch call to the chief's first line", labels[method],
                       _values(samples, method, "start_s"), "s"))
    if "ipyparallel" in samples:
        out.append(row(section, "ipyparallel: engines up (part of the above)", labels["ipyparallel"],
                       _values(samples, "ipyparallel", "engines_up_s"), "s"))
    if "kwnb" in samples:
        out.append(row(section, "kernel CPU s over the run", labels["kwnb"], _values(samples, "kwnb", "kernel_cpu_s"), "s"))

    if "bare again" in samples and "bare" in samples:  # the noise floor of every ratio above
        for key, metric in (("ports_s", "every worker's port accepts"), ("first_step_s", "chief's first step done")):
            out.append(aa_row(section, metric, samples, key, labels))

    launched = [s for s in samples.get("kwnb.launch", []) if s.get("ok")]
    if launched:
        unset = sum(not all(s["kwnb_port_open_at_set"]) for s in launched)
        if unset:
            findings.append(
                f"Worker.port_open_at stayed None for at least one worker in {unset} of {len(launched)} kwnb.launch runs "
                "although the port did open (the probe saw it): Task.observe (kwnb/engine/tasks/task.py) stops probing the port as "
                "soon as the worker has printed a line (TensorFlow logs before it starts its server), so port_open_at "
                "is only set when the port opens before any output.")
    findings += _bootstrap_finding(samples)
    for name, reason in data.get("skipped", {}).items():
        findings.append(f"{name} skipped: {reason}")
    out.sort(key=lambda line: line["section"])  # stable: the A/A rows join the end of their own section
    return out, findings


def _bootstrap_finding(samples: dict) -> list[str]:
    """Where kwnb's bring-up gap is: the launcher (call to first line) or the worker (its import)."""
    from .common import describe

    def median(method, key):
        return describe([s[key] - s["start_s"] if key != "start_s" else s[key] for s in samples.get(method, [])
                         if s.get("ok") and s.get(key) is not None and s.get("start_s") is not None])["median"]

    kwnb, bare = median("kwnb.launch", "imported_s"), median("bare", "imported_s")
    if kwnb is None or bare is None or kwnb < 1.05 * bare:
        return []
    return [f"The chief's `import tensorflow` took {kwnb:.2f} s (median) under kwnb.launch against {bare:.2f} s under "
            f"bare Popen, while the launch call to the script's first line took "
            f"{median('kwnb.launch', 'start_s') * 1000:.0f} ms against {median('bare', 'start_s') * 1000:.0f} ms: "
            "the bring-up gap is in the worker, not in the launcher (see kwnb/task/bootstrap.py, which starts the script)."]
