"""What every benchmark section shares: statistics, the machine description, readiness probes,
marker parsing and the results table.

Nothing here waits a fixed time for readiness: ports are probed, and step times are read from
marker lines that carry the worker's own clock (`BENCH step K T`), so how fast a method relays
its output cannot change its step times.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import socket
import statistics
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = Path(__file__).resolve().parent / "workloads"
TRAIN = WORKLOADS / "train.py"
WRITER = WORKLOADS / "writer.py"
IDLE = WORKLOADS / "idle.py"

# The environment kwnb gives its workers that changes what they do; the other methods get the same,
# so that the comparison is of the launch method, not of the job (tf-keras vs Keras 3 and so on).
WORKER_ENV = {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "-1", "MPLBACKEND": "Agg"}

SECTIONS = ("bringup", "throughput", "logpath", "scaling", "profile", "rerun", "kernelcost", "threads",
            "firstcell")  # run.py's, in order

_MARK = re.compile(r"BENCH (start|imported|done) (\d+\.\d+)|BENCH step (\d+) (\d+\.\d+)")


# ----- statistics ----------------------------------------------------------------------------
def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), without numpy."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return data[low] + (data[high] - data[low]) * (pos - low)


def describe(values: list[float]) -> dict:
    """Median and spread of a sample: what every row of the table shows."""
    data = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not data:
        return {"n": 0, "median": None, "p25": None, "p75": None, "min": None, "max": None, "mean": None}
    return {"n": len(data), "median": statistics.median(data), "p25": quantile(data, 0.25),
            "p75": quantile(data, 0.75), "min": min(data), "max": max(data), "mean": statistics.fmean(data)}


def paired_ratios(a: list[float | None], b: list[float | None]) -> list[float]:
    """a[i] / b[i] for each round where both were measured: pairs cancel the machine's drift."""
    return [x / y for x, y in zip(a, b) if x is not None and y not in (None, 0)]


# ----- the machine ---------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    """What the numbers were measured on: the table is meaningless without it."""
    memory = psutil.virtual_memory()
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count_logical": os.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model(),
        "memory_total_gb": round(memory.total / 2**30, 1),
        "memory_available_gb_at_start": round(memory.available / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "tensorflow": _version("tensorflow") or _version("tensorflow-cpu"),
        "tf_keras": _version("tf-keras") or _version("tf_keras"),
        "kwnb": _version("kwnb"),
        "ipyparallel": _version("ipyparallel"),
        "ipykernel": _version("ipykernel"),
        "ipywidgets": _version("ipywidgets"),
        "jupyter_client": _version("jupyter_client"),
        "psutil": _version("psutil"),
        "load_average_at_start": list(os.getloadavg()),
        "kwnb_source": kwnb_source(),
    }


def kwnb_source() -> dict:
    """Which kwnb was measured: a digest of its source files, subpackages included (engine/, backends/,
    task/, ...: a top-level glob left out backends/warm.py, which section 6 measures)."""
    import hashlib

    files = sorted((ROOT / "kwnb").rglob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(ROOT / "kwnb")).encode() + b"\0" + path.read_bytes())
    newest = max((path.stat().st_mtime for path in files), default=None)
    return {"sha256": digest.hexdigest()[:16], "files": len(files),
            "newest_change": None if newest is None else
            _dt.datetime.fromtimestamp(newest, _dt.timezone.utc).isoformat(timespec="seconds")}


class LoadSampler:
    """The machine's load while the benchmark ran: on a shared machine the reader needs it."""

    def __init__(self, interval: float = 2.0):
        self.interval, self.samples = interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-load")

    def _loop(self):
        psutil.cpu_percent(None)
        while not self._stop.wait(self.interval):
            self.samples.append({"t": time.time(), "load1": os.getloadavg()[0], "cpu_percent": psutil.cpu_percent(None)})

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def summary(self) -> dict:
        return {"load1": describe([s["load1"] for s in self.samples]),
                "cpu_percent": describe([s["cpu_percent"] for s in self.samples])}


# ----- readiness -----------------------------------------------------------------------------
# What the probe says once connected, to the smoke run's stand-in only (workloads/standin.py), which keeps its
# port open until it hears this; TensorFlow's servers in a full run hear nothing, as before.
PROBE_HELLO = b"probed"


def probe_hello(script) -> bytes:
    return PROBE_HELLO if Path(script).name == "standin.py" else b""


class PortProbe:
    """Polls host:port addresses every `interval` s from a thread; records when each first accepts.

    The same probe watches every method, so its resolution (20 ms) is the same for all of them. The
    time is taken on connecting, before `hello` (if any) is sent.
    """

    def __init__(self, addresses: list[str], interval: float = 0.02, deadline: float = 600.0, hello: bytes = b""):
        self.addresses = list(addresses)
        self._hello = hello
        self.open_at: dict[str, float] = {}
        self.first_probe_at: float | None = None
        self.already_open: list[str] = []  # open at the first probe: the time is then an upper bound
        self._interval, self._deadline = interval, deadline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="bench-probe")

    def start(self) -> "PortProbe":
        self._thread.start()
        return self

    def _loop(self):
        end = time.monotonic() + self._deadline
        first = True
        while not self._stop.is_set() and time.monotonic() < end:
            if first:
                self.first_probe_at = time.time()
            for address in self.addresses:
                if address in self.open_at:
                    continue
                host, _, port = address.rpartition(":")
                try:
                    with socket.create_connection((host, int(port)), timeout=0.05) as conn:
                        self.open_at[address] = time.time()
                        if first:
                            self.already_open.append(address)
                        if self._hello:
                            conn.sendall(self._hello)
                except OSError:
                    pass
            first = False
            if len(self.open_at) == len(self.addresses):
                return
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def all_open_at(self) -> float | None:
        if len(self.open_at) < len(self.addresses):
            return None
        return max(self.open_at.values())


def parse_markers(text: str) -> dict:
    """{'start': T, 'imported': T, 'steps': {1: T, 10: T, ...}, 'done': T} from a worker's output."""
    found: dict = {"steps": {}}
    for match in _MARK.finditer(text):
        if match[1]:
            found.setdefault(match[1], float(match[2]))
        else:
            found["steps"].setdefault(int(match[3]), float(match[4]))
    return found


def read_markers(path: os.PathLike | str) -> dict:
    try:
        return parse_markers(Path(path).read_text(errors="replace"))
    except OSError:
        return {"steps": {}}


def steps_per_second(markers: dict, mark_a: int, mark_b: int) -> float | None:
    steps = markers.get("steps", {})
    if mark_a in steps and mark_b in steps and steps[mark_b] > steps[mark_a]:
        return (mark_b - mark_a) / (steps[mark_b] - steps[mark_a])
    return None


def since(t0: float, t: float | None) -> float | None:
    return None if t is None else t - t0


def job(cfg) -> Path:
    """The training job every method runs: train.py, or in a smoke run its stand-in (cfg.job)."""
    return WORKLOADS / cfg.job


def wait_pids_gone(pids: list[int], timeout: float = 30.0) -> None:
    """Let the previous method's processes be gone before the next one starts."""
    end = time.monotonic() + timeout
    for pid in pids:
        try:
            psutil.Process(pid).wait(max(0.0, end - time.monotonic()))
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ----- the table -----------------------------------------------------------------------------
def row(section: str, metric: str, method: str, values: list[float], unit: str, *, target: str = "",
        met: bool | None = None, note: str = "") -> dict:
    """One line of the results table: a distribution (or a distribution of paired ratios)."""
    return {"section": section, "metric": metric, "method": method, "unit": unit, **describe(values),
            "samples": [None if v is None else round(float(v), 6) for v in values],
            "target": target, "target_met": met, "note": note}


def check(value: float | None, op: str, limit: float) -> bool | None:
    if value is None:
        return None
    return value <= limit if op == "<=" else value >= limit


def _fmt(value, unit: str) -> str:
    if value is None:
        return "–"
    if unit in ("ratio", "x"):
        return f"{value:.3f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"


def markdown(results: dict) -> str:
    machine = results["machine"]
    config = results["config"]
    load = results.get("load", {}).get("load1", {})
    ran = config.get("sections") or list(SECTIONS)
    some = "" if set(SECTIONS) <= set(ran) else f": {', '.join(ran)} only"  # e.g. --sections rerun
    lines = [
        f"# kwnb benchmarks ({'smoke' if config['smoke'] else 'full'} run{some})",
        "",
        f"Measured {machine['date']} on {machine['cpu_count_logical']} logical CPUs ({machine['cpu_model']}), "
        f"{machine['memory_total_gb']} GB memory, Python {machine['python']}, TensorFlow {machine['tensorflow']}, "
        f"tf-keras {machine['tf_keras']}, ipyparallel {machine['ipyparallel'] or 'not installed'}; {machine['platform']}. "
        f"kwnb source {machine['kwnb_source']['sha256']} (newest file change {machine['kwnb_source']['newest_change']}).",
        f"{config['rounds']} rounds"
        + (f" ({config.get('throughput_rounds', config['rounds'])} for throughput, whose runs bring-up counts too)"
           if "throughput" in ran else "")
        + f", methods in a shuffled order each round; wall time {results['wall_seconds']:.0f} s"
        + (" (" + ", ".join(f"{name} {s:.0f} s" for name, s in results["section_seconds"].items()) + "). "
           if results.get("section_seconds") else ". ")  # runs before 2026-11-24 did not time their sections
        + (f"Machine load (1-min load average) during the run: median {load['median']:.1f}, "
           f"max {load['max']:.1f} on {machine['cpu_count_logical']} CPUs." if load.get("median") is not None else ""),
    ]
    if config.get("note"):
        lines += ["", f"**Note:** {config['note']}"]
    lines += [
        "",
        "Medians with the interquartile range (p25–p75) and the extremes; ratios are per-round pairs "
        "(kwnb and the other method measured in the same round), then the median of those pairs.",
        "",
        "| section | metric | method | median | p25–p75 | min–max | n | unit | target | target met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["rows"]:
        met = {True: "yes", False: "**no**", None: ""}[r["target_met"]]
        unit = r["unit"]
        lines.append(
            f"| {r['section']} | {r['metric']} | {r['method']} | {_fmt(r['median'], unit)} | "
            f"{_fmt(r['p25'], unit)}–{_fmt(r['p75'], unit)} | {_fmt(r['min'], unit)}–{_fmt(r['max'], unit)} | "
            f"{r['n']} | {unit} | {r['target']} | {met} |")
    notes = [(r["section"], r["metric"], r["method"], r["note"]) for r in results["rows"] if r["note"]]
    if notes:
        lines += ["", "Notes:", ""]
        lines += [f"- {s} / {m} / {meth}: {n}" for s, m, meth, n in notes]
    if results.get("findings"):
        lines += ["", "Findings:", ""]
        lines += [f"- {f}" for f in results["findings"]]
    if results.get("errors"):
        lines += ["", "Errors (a method that failed in a round is left out of that round's figures):", ""]
        lines += [f"- {e}" for e in results["errors"]]
    lines += ["", f"Reproduce: `{config['command']}`", ""]
    return "\n".join(lines)


def write_results(results: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "latest.json", out / "latest.md"
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    md_path.write_text(markdown(results))
    return json_path, md_path
