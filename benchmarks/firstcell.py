"""Section 9: the first training cell of a session (issue 22). Does loading the extension make the
first cell warm?

  kwnb first cell   a fresh Jupyter kernel; `%load_ext kwnb` (which prepares the warm pool, as a
                    user's kernel does: KWNB_WARM on, kwnb's default network); 15 s of reading
                    (nothing runs); then one cell, `%%kw_worker main.py -n 2 --wait` with the
                    benchmark job as its body (section 1's short job)
  kwnb, quiet check off   the same with the pool's wait for quiet CPUs turned off in the kernel
                    before `%load_ext` (not kwnb's default): on a machine busy with other work, it
                    separates what the early pool gives from the pool's choice to wait
  bare              a fresh kernel, the same 15 s, then bare Popen of the same script from it and a
                    wait for both processes (kernel.py's bare cells), on the host network

Each round runs both in a shuffled order, each in a kernel of its own (closed afterwards: its pool
ends with it). Times are from the cell's start to the chief's `BENCH step 1` marker (first step) and
to the cell returning (whole run; kwnb's --wait returns after its summary, curves and timeline).
Targets: kwnb / bare <= 0.6 for the whole run and <= 0.4 for the first step, at the median.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path

from .common import check, job, log, paired_ratios, read_markers, row, since, wait_pids_gone
from .hooks import BUSY_SHARE, NETWORK_CHOSEN, POOL_CAP_REASON, POOL_REFUSED, POOL_STATUS

SECTION = "9. first cell"
METHODS = ("kwnb first cell", "kwnb, quiet check off", "bare")


def labels(cfg) -> dict[str, str]:
    return {"kwnb first cell": f"kwnb in a fresh kernel, %load_ext {cfg.reading_seconds:g} s before (default network)",
            "kwnb, quiet check off": "the same, the pool's wait for quiet CPUs off (not the default)",
            "bare": "bare Popen from a fresh kernel (host network)"}


TARGETS = {"total_s": 0.6, "first_step_s": 0.4}
RUN_TIMEOUT = 300.0

QUIET_CHECK_OFF = f"""
{BUSY_SHARE.import_line('_warm_room')}
_warm_room.{BUSY_SHARE.name}  # read first: assigning a name kwnb no longer has would add it, unused
_warm_room.{BUSY_SHARE.name} = float('inf')
"""
LOAD = """
%load_ext kwnb
import json, os, time
import kwnb
print("loaded")
"""
# A .format template (line, source); the hook's name goes in with %, which .format leaves alone.
CELL = """
_t0 = time.time()
get_ipython().run_cell_magic("kw_worker", {line!r}, {source!r})
_returned = time.time()
_run = kwnb.get_run("main")
print(json.dumps({{"t0": _t0, "returned": _returned, "codes": _run.exit_codes, "warm": [w.warm for w in _run.workers],
                  "log": str(_run.workers[0].log_path), "network": _run.launcher.%s}}))
""" % NETWORK_CHOSEN.name
POOL_PIDS = f"""
{POOL_STATUS.import_line('_warm')}
print(json.dumps({{"pids": [w["pid"] for w in _warm.{POOL_STATUS.attribute}()],
                  "refused": _warm.{POOL_REFUSED.attribute}, "cap": _warm.{POOL_CAP_REASON.attribute}}}))
"""


@contextlib.contextmanager
def user_defaults():
    """KWNB_WARM on and KWNB_NETWORK unset (run.py sets both for sections 1-5), as in a user's kernel."""
    saved = {name: os.environ.pop(name, None) for name in ("KWNB_WARM", "KWNB_NETWORK")}
    os.environ["KWNB_WARM"] = "1"
    try:
        yield
    finally:
        os.environ.pop("KWNB_WARM", None)
        os.environ.update({k: v for k, v in saved.items() if v is not None})


def run_kwnb(cfg, workdir: Path, quiet_check: bool = True) -> dict:
    from .bringup import short_job, train_args
    from .kernel import Kernel

    folder = workdir / f"kwnb-{time.time_ns()}"
    folder.mkdir(parents=True)
    with user_defaults():
        kernel = Kernel(folder)
    try:
        kernel.execute(LOAD if quiet_check else QUIET_CHECK_OFF + LOAD)
        time.sleep(cfg.reading_seconds)  # the learner reads the next cell
        pool = kernel.execute_json(POOL_PIDS)
        line = f"main.py -n {cfg.n} --wait --args \"{' '.join(train_args(short_job(cfg)))}\""
        ran = kernel.execute_json(CELL.format(line=line, source=job(cfg).read_text()), timeout=RUN_TIMEOUT)
    finally:
        kernel.close()
        wait_pids_gone([kernel.pid], 30)
    chief = read_markers(ran["log"])
    return {"ok": ran["codes"] == [0] * cfg.n, "codes": ran["codes"], "warm": ran["warm"], "network": ran["network"],
            "pool_before_cell": pool, "first_step_s": since(ran["t0"], chief.get("steps", {}).get(1)),
            "total_s": ran["returned"] - ran["t0"]}


def run_bare(cfg, workdir: Path) -> dict:
    from .bringup import short_job, train_args
    from .kernel import Kernel, run_job

    folder = workdir / f"bare-{time.time_ns()}"
    folder.mkdir(parents=True)
    kernel = Kernel(folder)
    try:
        kernel.execute("import json, os, subprocess, sys, time\nimport portpicker")
        time.sleep(cfg.reading_seconds)
        result = run_job(kernel, "bare", job(cfg), cfg.n, train_args(short_job(cfg)), "bare", folder, timeout=RUN_TIMEOUT,
                         probe=False)
    finally:
        kernel.close()
        wait_pids_gone([kernel.pid], 30)
    chief = read_markers(result["logs"][0])
    return {"ok": result["ok"], "codes": result["exit_codes"],
            "first_step_s": since(result["t0"], chief.get("steps", {}).get(1)), "total_s": result["run_s"]}


def measure(cfg, workdir: Path, errors: list[str], kernel=None) -> dict:
    runners = {"kwnb first cell": run_kwnb, "bare": run_bare,
               "kwnb, quiet check off": lambda cfg, workdir: run_kwnb(cfg, workdir, quiet_check=False)}
    samples: dict[str, list] = {method: [] for method in cfg.firstcell_methods}
    order = random.Random(cfg.seed + 8)
    for number in range(cfg.firstcell_rounds):
        methods = list(cfg.firstcell_methods)
        order.shuffle(methods)
        for method in methods:
            log(f"first cell round {number + 1}/{cfg.firstcell_rounds}: {method}")
            try:
                result = runners[method](cfg, workdir)
            except Exception as error:  # one failed round is a finding, not the end of the benchmark
                errors.append(f"first cell, {method}: {type(error).__name__}: {error}")
                result = {"ok": False, "error": str(error)}
            if not result["ok"]:
                errors.append(f"first cell, {method}: {result.get('codes') or result.get('error')}")
            samples[method].append(result)
            time.sleep(cfg.pause)
    return {"samples": samples}


def _values(samples: dict, method: str, key: str) -> list:
    return [s.get(key) if s.get("ok") else None for s in samples[method]]


def rows(data: dict, cfg) -> tuple[list[dict], list[str]]:
    samples, out, findings, names = data["samples"], [], [], labels(cfg)
    mine = [m for m in METHODS if m != "bare" and m in samples]
    for key, metric in (("first_step_s", "cell start to the chief's first step"),
                        ("total_s", "cell start to the cell returning (whole run)")):
        out += [row(SECTION, metric, names[m], _values(samples, m, key), "s") for m in [*mine, "bare"]]
        for method in mine:
            ratio = row(SECTION, metric, f"{names[method]} / {names['bare']}",
                        paired_ratios(_values(samples, method, key), _values(samples, "bare", key)), "ratio",
                        target=f"<= {TARGETS[key]}" if method == "kwnb first cell" else "")
            ratio["target_met"] = check(ratio["median"], "<=", TARGETS[key]) if method == "kwnb first cell" else None
            out.append(ratio)
    for method in mine:
        warm = [sum(s.get("warm") or []) for s in samples[method]]
        out.append(row(SECTION, f"tasks started warm (of {cfg.n})", names[method], warm, "tasks",
                       target=f"{cfg.n} every round"))
        for number, sample in enumerate(samples[method], 1):
            if sum(sample.get("warm") or []) < cfg.n:
                pool = sample.get("pool_before_cell", {})
                findings.append(f"Section 9, {method}, round {number}: {sum(sample.get('warm') or [])} of {cfg.n} "
                                f"tasks started warm; the pool before the cell: {len(pool.get('pids', []))} "
                                f"interpreter(s), {pool.get('refused') or 'nothing refused'}.")
    return out, findings
