"""Section 6: re-runs (issue 15). After a first run, kwnb starts a re-run's tasks in warm interpreters
(TensorFlow already imported, kwnb/backends/warm.py); how far ahead of a bare launch does that put it?

  kwnb warm               kwnb.launch(train.py, n=2, warm=True) from this process, on the network
                          kwnb picks (private where it can be): KWNB_WARM and KWNB_NETWORK, which
                          run.py sets for sections 1-5, are set aside for this section
  kwnb warm, kernel       the same from a real Jupyter kernel with the dashboard displayed (the
                          kernel's own pool: a pool belongs to the process that launches)
  bare                    bare Popen of the same script (bringup.run_bare), on the host network
  kwnb warm, host network kwnb.launch(..., network="host"), in rounds of its own with a bare run
                          each: a pool holds interpreters for one network, so alternating the two
                          would start every run cold

Each group of rounds starts with an untimed first run of each kwnb method (cold: the pool is
emptied first), which fills the pool. Then every round runs each method once in a shuffled order.
After every kwnb run the benchmark waits until the pool is refilled (POOL.status() polled every
0.5 s until every interpreter is ready), so a refill's imports never overlap the next method; that
wait is reported as the refill time, with the idle pool's memory (PSS) at that moment.
Times are from the launch call to the chief's `BENCH step 1` marker and to every process exited
(kwnb: Run.ended_at; bare: its last wait() returning). Ratios pair the methods of one round.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import time
from pathlib import Path

import psutil

from .common import check, job, log, paired_ratios, read_markers, row, since
from .hooks import BUSY_SHARE, NETWORK_CHOSEN, patched

RUN_TIMEOUT = 300.0
POLL_SECONDS = 0.5  # each status() reads two processes' smaps_rollup, ~20 ms of CPU here: not every 0.1 s
PHASES = {"default": ("kwnb warm", "kwnb warm, kernel", "bare"),
          "host": ("kwnb warm, host network", "bare, host rounds")}
NETWORK = {"kwnb warm": None, "kwnb warm, kernel": None, "kwnb warm, host network": "host"}
LABELS = {"kwnb warm": "kwnb.launch, warm (default network)",
          "kwnb warm, kernel": "kwnb in a kernel + dashboard, warm (default network)",
          "kwnb warm, host network": "kwnb.launch, warm, network=\"host\"",
          "bare": "bare Popen", "bare, host rounds": "bare Popen (host-network rounds)"}
BASELINE = {"kwnb warm": "bare", "kwnb warm, kernel": "bare", "kwnb warm, host network": "bare, host rounds"}
TARGETS = {"first_step_s": 0.5, "total_s": 0.75}  # issue 15


# ----- the pool, from the process that owns it (this one, or the kernel through a cell) ----------
def wait_refilled(n: int, since_t: float, timeout: float) -> dict:
    """Poll POOL.status() until it holds n ready interpreters; imported in the kernel too."""
    from kwnb.backends.warm import POOL

    deadline, polls, idle = time.monotonic() + timeout, 0, []
    while time.monotonic() < deadline:
        idle, polls = POOL.status(), polls + 1
        if len(idle) >= n and all(warm["ready"] for warm in idle):
            break
        if POOL.refused and not idle and polls > 2:  # e.g. memory short: no refill is coming
            break
        time.sleep(POLL_SECONDS)
    ready = len(idle) >= n and all(warm["ready"] for warm in idle)
    now = time.time()
    return {"ready": ready, "refill_s": now - since_t if ready else None, "polls": polls,
            "pss": [warm["pss"] for warm in idle], "pids": [warm["pid"] for warm in idle], "refused": POOL.refused}


def empty_pool() -> int:
    from kwnb.backends.warm import POOL

    return POOL.stop()


def helpers(owner: psutil.Process, warm_pids: list[int], skip: set[int] = frozenset()) -> list[dict]:
    """The pool's other processes (a private network's holder and slirp4netns/pasta), with their PSS."""
    found = []
    for child in owner.children(recursive=True):
        if child.pid in warm_pids or child.pid in skip:
            continue
        try:
            if child.name().startswith(NETWORK_TOOLS) or any(part.endswith(HOLDER) for part in child.cmdline()):
                found.append({"name": child.name(), "pss": child.memory_full_info().pss})
        except psutil.Error:
            pass
    return found


# What a private network's helpers are (kwnb/backends/netns.py), not any child of the caller: a test process may
# have others (a kernel's picture painter started by an earlier test).
NETWORK_TOOLS = ("slirp4netns", "pasta", "passt")
HOLDER = "netns_holder.py"


def _tree(pid: int | None) -> set[int]:
    if pid is None:
        return set()
    try:
        return {pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        return {pid}


# ----- the methods -------------------------------------------------------------------------------
def run_kwnb_warm(cfg, workdir: Path, network: str | None, kernel=None) -> dict:
    import kwnb

    from .bringup import _result, train_args

    t0 = time.time()
    run = kwnb.launch(job(cfg), n=cfg.n, name="rerun", runs_dir=workdir / "kwnb-runs", args=train_args(cfg),
                      network=network, warm=True)
    codes = run.wait(RUN_TIMEOUT)
    returned = time.time()
    if not run.done:
        run.stop("benchmark timeout")
        codes = run.exit_codes
    chief = read_markers(run.workers[0].log_path)
    result = _result(t0, None, chief, cfg, run.ended_at or returned, codes, wait_returned_s=returned - t0,
                     warm=[task.warm for task in run.workers], network=run.launcher.chosen,
                     log=str(run.workers[0].log_path))
    pool = wait_refilled(cfg.n, run.ended_at or returned, cfg.refill_timeout)
    pool["helpers"] = helpers(psutil.Process(), pool["pids"], _tree(kernel.pid if kernel else None))
    return {**result, "pool": pool}


KERNEL_AFTER = f"""
print(json.dumps({{"warm": [w.warm for w in _run.workers], "network": _run.launcher.{NETWORK_CHOSEN.name}}}))
"""
# run.py sets KWNB_WARM=0 and KWNB_NETWORK=host for sections 1-5 (cold starts, compared on the host
# network); this section measures warm starts on kwnb's own default network, in the kernel too, whose
# launch cell (kernel.py) takes kwnb's defaults.
OWN_DEFAULTS = {"KWNB_WARM": "1", "KWNB_NETWORK": None}
# The benchmark waits for every refill itself (no method overlaps one), so the pool's own wait for
# quiet CPUs (kwnb/backends/warm_room.py) is off for this section: on a machine busy with other work it
# would keep the pool empty, and this section measures what a warm re-run gives, not when one comes.
QUIET_CHECK_OFF = f"""
{BUSY_SHARE.import_line('_warm_room')}
_bench['busy_share'], _warm_room.{BUSY_SHARE.name} = _warm_room.{BUSY_SHARE.name}, float('inf')
"""
KERNEL_ENV_ON = f"""
_bench['env'] = {{k: os.environ.pop(k, None) for k in {list(OWN_DEFAULTS)!r}}}
os.environ.update({{k: v for k, v in {OWN_DEFAULTS!r}.items() if v is not None}})
{QUIET_CHECK_OFF}"""
KERNEL_ENV_BACK = f"""
_warm_room.{BUSY_SHARE.name} = _bench['busy_share']
for _k, _v in _bench['env'].items():
    os.environ.pop(_k, None)
    if _v is not None:
        os.environ[_k] = _v
"""


@contextlib.contextmanager
def own_defaults(kernel):
    """Warm starts on, KWNB_NETWORK unset (kwnb picks), here and in the kernel; as before afterwards."""
    saved = {k: os.environ.pop(k, None) for k in OWN_DEFAULTS}
    os.environ.update({k: v for k, v in OWN_DEFAULTS.items() if v is not None})
    with patched(BUSY_SHARE, float("inf")):  # see QUIET_CHECK_OFF
        if kernel is not None:
            kernel.execute(KERNEL_ENV_ON)
        try:
            yield
        finally:
            for name, value in saved.items():
                os.environ.pop(name, None)
                if value is not None:
                    os.environ[name] = value
            if kernel is not None:
                kernel.execute(KERNEL_ENV_BACK)
KERNEL_REFILL = """
from benchmarks.rerun import wait_refilled as _wait_refilled
print(json.dumps(_wait_refilled({n}, _run.ended_at or time.time(), {timeout})))
"""


def run_kwnb_kernel(cfg, workdir: Path, kernel) -> dict:
    from .bringup import train_args
    from .kernel import run_job

    result = run_job(kernel, "kwnb", job(cfg), cfg.n, train_args(cfg), "rerun", workdir / "kernel", timeout=RUN_TIMEOUT,
                     probe=False)  # a private network's ports cannot be reached from here
    t0 = result["t0"]
    chief = read_markers(result["logs"][0])
    result.update(kernel.execute_json(KERNEL_AFTER), start_s=since(t0, chief.get("start")),
                  imported_s=since(t0, chief.get("imported")), first_step_s=since(t0, chief["steps"].get(1)),
                  total_s=result["run_s"], log=result["logs"][0])
    pool = kernel.execute_json(KERNEL_REFILL.format(n=cfg.n, timeout=cfg.refill_timeout),
                               timeout=cfg.refill_timeout + 60)
    pool["helpers"] = helpers(kernel.process, pool["pids"])
    return {**result, "pool": pool}


def run_method(method: str, cfg, workdir: Path, kernel) -> dict:
    from .bringup import run_bare

    try:
        if method.startswith("bare"):
            return run_bare(cfg, workdir)
        if method == "kwnb warm, kernel":
            return run_kwnb_kernel(cfg, workdir, kernel)
        return run_kwnb_warm(cfg, workdir, NETWORK[method], kernel)
    except Exception as error:  # noqa: BLE001 - one broken method must not hide the others
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def measure(cfg, workdir: Path, errors: list[str], kernel=None) -> dict:
    """Each group of rounds: empty the pools, one untimed first run per kwnb method, then the rounds."""
    from .bringup import warm_up

    short = dataclasses.replace(cfg, steps=cfg.bringup_steps, mark_a=min(cfg.mark_a, cfg.bringup_steps),
                                mark_b=cfg.bringup_steps)
    if not cfg.smoke:
        warm_up()
    samples, first_runs, skipped = {}, {}, {}
    phases = {"default": PHASES["default"], **({"host": PHASES["host"]} if cfg.rerun_host else {})}
    with own_defaults(kernel):
        try:
            for phase, methods in phases.items():
                _phase(short, workdir, errors, kernel, phase, methods, samples, first_runs, skipped)
        finally:
            _empty_pools(kernel)
    return {"samples": samples, "first_runs": first_runs, "skipped": skipped}


def _phase(cfg, workdir: Path, errors: list[str], kernel, phase: str, methods, samples: dict, first_runs: dict,
           skipped: dict) -> None:
    if kernel is None and "kwnb warm, kernel" in methods:
        skipped["kwnb warm, kernel"] = "no kernel"
    methods = [m for m in methods if m not in skipped]
    _empty_pools(kernel if "kwnb warm, kernel" in methods else None)
    for method in (m for m in methods if m.startswith("kwnb")):
        log(f"re-run, {phase}: first run (untimed) of {method}")
        first_runs[method] = run_method(method, cfg, workdir, kernel)
    _rounds(cfg, workdir, errors, kernel, phase, methods, samples)


def _empty_pools(kernel) -> None:
    empty_pool()
    if kernel is not None:
        kernel.execute("from benchmarks.rerun import empty_pool as _empty_pool; _empty_pool()")


def _rounds(cfg, workdir: Path, errors: list[str], kernel, phase: str, methods: list[str], samples: dict) -> None:
    shuffle = random.Random(f"{cfg.seed}-rerun-{phase}").shuffle
    for method in methods:
        samples[method] = []
    for r in range(cfg.rounds):
        order = list(methods)
        shuffle(order)
        for position, method in enumerate(order):
            log(f"re-run round {r + 1}/{cfg.rounds}: {method}")
            result = run_method(method, cfg, workdir, kernel)
            result["round"], result["position"] = r, position
            if not result.get("ok"):
                errors.append(f"re-run round {r + 1} {method}: {result.get('error') or result.get('exit_codes')}")
            samples[method].append(result)
            pool = result.get("pool", {})
            log("  -> " + ", ".join(f"{k} {v:.2f}" for k, v in
                                    [("first step", result.get("first_step_s")), ("run", result.get("total_s")),
                                     ("refill", pool.get("refill_s"))] if v is not None)
                + (f", warm {sum(result['warm'])}/{len(result['warm'])}" if "warm" in result else ""))
            if not pool:  # after a kwnb run, waiting for the refill was the pause
                time.sleep(cfg.pause)


# ----- the table ---------------------------------------------------------------------------------
def _values(samples: dict, method: str, key: str) -> list:
    return [s.get(key) if s.get("ok") else None for s in samples.get(method, [])]


def _pool_values(samples: dict, method: str, pick) -> list:
    return [pick(s["pool"]) if s.get("pool", {}).get("ready") else None for s in samples.get(method, [])]


def rows(data: dict, cfg) -> tuple[list[dict], list[str]]:
    samples, first = data["samples"], data.get("first_runs", {})
    section = f"6. re-run, {cfg.n} workers, {cfg.bringup_steps} steps"
    mine = [m for m in ("kwnb warm", "kwnb warm, kernel", "kwnb warm, host network") if m in samples]
    present = [m for m in ("kwnb warm", "kwnb warm, kernel", "bare", "kwnb warm, host network", "bare, host rounds")
               if m in samples]
    out = []
    for key, metric in (("first_step_s", "launch call to the chief's first step"),
                        ("total_s", "whole run: launch call to every process exited")):
        out += [row(section, metric, LABELS[m], _values(samples, m, key), "s") for m in present]
        for method in mine:
            ratio = row(section, metric, f"{LABELS[method]} / {LABELS[BASELINE[method]]}",
                        paired_ratios(_values(samples, method, key), _values(samples, BASELINE[method], key)),
                        "ratio", target=f"<= {TARGETS[key]}")
            ratio["target_met"] = check(ratio["median"], "<=", TARGETS[key])
            out.append(ratio)
        out += [row(section, f"{metric}, first run (cold, untimed in the ratios)", LABELS[m],
                    [first[m].get(key) if first[m].get("ok") else None], "s") for m in mine if m in first]
    for key, metric in (("start_s", "launch call to the chief's first line"),
                        ("imported_s", "launch call to the chief's `import tensorflow` done")):
        out += [row(section, metric, LABELS[m], _values(samples, m, key), "s") for m in present]
    out += _pool_rows(samples, mine, section, cfg)
    if "kwnb warm" in samples:
        out.append(row(section, "launch call to run.wait() returning (curves.png, timeline.png written)",
                       LABELS["kwnb warm"], _values(samples, "kwnb warm", "wait_returned_s"), "s"))
    if "kwnb warm, kernel" in samples:
        out.append(row(section, "kernel CPU s over the run", LABELS["kwnb warm, kernel"],
                       _values(samples, "kwnb warm, kernel", "kernel_cpu_s"), "s"))
    return out, findings(data, cfg)


def _pool_rows(samples: dict, mine: list[str], section: str, cfg) -> list[dict]:
    out = []
    for method in mine:
        label, runs = LABELS[method], samples[method]
        warm = [sum(s["warm"]) if "warm" in s else None for s in runs]
        count = row(section, f"tasks started warm (of {cfg.n})", label, warm, "tasks", target=f"{cfg.n} every round")
        count["target_met"] = None if not warm or None in warm else min(warm) == cfg.n
        out.append(count)
        out.append(row(section, "pool refill: run end to every warm interpreter ready", label,
                       _pool_values(samples, method, lambda p: p["refill_s"]), "s",
                       note=f"polled every {POLL_SECONDS:g} s"))
        per = [pss / 2**20 for s in runs if s.get("pool", {}).get("ready") for pss in s["pool"]["pss"]]
        out.append(row(section, "idle pool: PSS per warm interpreter", label, per, "MB"))
        out.append(row(section, "idle pool: PSS of its warm interpreters in all", label,
                       _pool_values(samples, method, lambda p: sum(p["pss"]) / 2**20), "MB"))
        if NETWORK[method] is None:
            out.append(row(section, "idle pool: PSS of its private network's processes", label,
                           _pool_values(samples, method, lambda p: sum(h["pss"] for h in p["helpers"]) / 2**20), "MB",
                           note="the namespace's holder and slirp4netns or pasta; 0 where kwnb chose the host network"))
    return out


def findings(data: dict, cfg) -> list[str]:
    found = []
    for method, runs in data["samples"].items():
        for s in runs:
            if "warm" in s and sum(s["warm"]) < cfg.n:
                found.append(f"re-run round {s['round'] + 1}, {LABELS[method]}: {sum(s['warm'])} of {cfg.n} tasks "
                             "started warm.")
            pool = s.get("pool")
            if pool is not None and not pool.get("ready"):
                found.append(f"re-run round {s['round'] + 1}, {LABELS[method]}: the pool was not refilled within "
                             f"{cfg.refill_timeout:g} s ({pool.get('refused') or 'no reason given'}).")
    networks = sorted({s.get("network") for m in ("kwnb warm", "kwnb warm, kernel") for s in data["samples"].get(m, [])
                       if s.get("network")})
    if networks:
        found.append(f"Re-run: kwnb's default network here was {' and '.join(networks)}; bare Popen runs on the host's.")
    found += [f"{name} skipped: {reason}" for name, reason in data.get("skipped", {}).items()]
    return found

