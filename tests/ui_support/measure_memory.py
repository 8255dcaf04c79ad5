"""Peak memory of each notebook, run as Binder would run it: will it fit in Binder's ~2 GB?

    .venv/bin/python tests/ui_support/measure_memory.py                 # notebooks/*.ipynb (a stand-in if none)
    .venv/bin/python tests/ui_support/measure_memory.py --stand-in      # also the stand-in 2-worker notebooks
    .venv/bin/python tests/ui_support/measure_memory.py a.ipynb b.ipynb

Each notebook is executed with nbclient in a scratch copy of the repository's notebooks/ and
examples/ folders (so nothing is written into the work tree), while a thread samples, every
0.1 s, the kernel and all its descendants (kwnb's worker processes and anything they start).
It prints a Markdown table:

- RSS, summed over the processes: what `ps` shows. Shared libraries (TensorFlow's are large)
  count once per process, so this overstates what a container's memory limit charges.
- PSS, summed: shared pages split between the processes that map them; the closer estimate of
  what the processes together take.

KWNB_OFFLINE=1 is set unless already set (the MNIST examples then use kwnb's shipped
8,000-digit sample instead of downloading); the stand-in "full-size MNIST" variant pads that
sample to 60,000 digits to show what a Binder session with the real download would need.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
BINDER_LIMIT = 2 * 1024 ** 3
MiB = 1024 ** 2


def stand_ins() -> dict[str, nbformat.NotebookNode]:
    """Notebooks that run a 2-worker kwnb training, built from the repository's own scripts."""
    notebooks = {}
    example = REPO / "examples" / "mnist_keras.py"
    if example.exists():
        script = example.read_text()
        notebooks["stand-in: examples/mnist_keras.py, 2 workers"] = _training_notebook("mnist_keras.py", script)
        load = "(x_train, y_train), _ = mnist.load_data()\n"
        if load in script:
            padded = script.replace(load, load + "x_train, y_train = np.resize(x_train, (60000, 28, 28)), "
                                                 "np.resize(y_train, 60000)  # full MNIST size\n")
            notebooks["stand-in: mnist_keras.py at full MNIST size (60,000), 2 workers"] = _training_notebook(
                "mnist_keras.py", padded)
    fit = REPO / "tests" / "scripts" / "keras_fit.py"
    if fit.exists():
        notebooks["stand-in: tests/scripts/keras_fit.py, 2 workers"] = _training_notebook("keras_fit.py", fit.read_text())
    return notebooks


def _training_notebook(filename: str, script: str) -> nbformat.NotebookNode:
    name = Path(filename).stem
    cells = ["%load_ext kwnb", f"%%kw_worker {filename} -n 2\n{script}", f"%kw_wait {name}",
             f"import kwnb\nassert kwnb.get_run({name!r}).exit_codes == [0, 0], kwnb.get_run({name!r}).exit_codes"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return notebook


class Sampler(threading.Thread):
    """Samples this process's descendants (the kernel and everything under it) until stopped."""

    def __init__(self, interval: float = 0.1, pss: bool = True):
        super().__init__(daemon=True)
        self.interval, self.pss = interval, pss
        self.me = psutil.Process()
        self.stop_event = threading.Event()
        self.peak_rss = self.peak_pss = self.peak_kernel_rss = self.peak_others_rss = 0
        self.peak_processes = 0
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)

    def sample(self) -> None:
        rss = pss = kernel = 0
        processes = self.me.children(recursive=True)
        for process in processes:
            try:
                if self.pss:
                    info = process.memory_full_info()
                    pss += getattr(info, "pss", info.uss)
                else:
                    info = process.memory_info()
                rss += info.rss
                if process.ppid() == self.me.pid:  # the kernel (nbclient starts it directly)
                    kernel += info.rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self.samples += 1
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
        self.peak_kernel_rss = max(self.peak_kernel_rss, kernel)
        self.peak_others_rss = max(self.peak_others_rss, rss - kernel)
        self.peak_processes = max(self.peak_processes, len(processes))

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def measure(label: str, notebook: nbformat.NotebookNode, cwd: Path, timeout: int) -> dict:
    sampler = Sampler()
    sampler.start()
    started = time.monotonic()
    error = ""
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd)}}).execute()
    except Exception as exc:  # a failing notebook still gets its row, marked
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
    finally:
        seconds = time.monotonic() - started
        sampler.stop()
    return {"notebook": label, "seconds": seconds, "kernel": sampler.peak_kernel_rss,
            "others": sampler.peak_others_rss, "rss": sampler.peak_rss, "pss": sampler.peak_pss,
            "processes": sampler.peak_processes, "samples": sampler.samples, "error": error}


def table(rows: list[dict]) -> str:
    lines = ["| notebook | time (s) | peak kernel RSS | peak workers RSS | peak total RSS | peak total PSS "
             "| processes | fits 2 GB (PSS) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        fits = "error: " + r["error"] if r["error"] else ("yes" if r["pss"] < BINDER_LIMIT else "**no**")
        lines.append(f"| {r['notebook']} | {r['seconds']:.0f} | {r['kernel'] / MiB:,.0f} MiB | {r['others'] / MiB:,.0f} MiB "
                     f"| {r['rss'] / MiB:,.0f} MiB | {r['pss'] / MiB:,.0f} MiB | {r['processes']} | {fits} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebooks to run (default: notebooks/*.ipynb)")
    parser.add_argument("--stand-in", action="store_true", help="also run the stand-in 2-worker notebooks")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    os.environ.setdefault("KWNB_OFFLINE", "1")

    paths = [Path(p) for p in (args.notebooks or sorted(glob.glob(str(REPO / "notebooks" / "*.ipynb"))))]
    with tempfile.TemporaryDirectory(prefix="kwnb-memory-") as scratch:
        scratch = Path(scratch)
        for folder in ("notebooks", "examples"):
            if (REPO / folder).is_dir():
                shutil.copytree(REPO / folder, scratch / folder, ignore=shutil.ignore_patterns(".kwnb", ".ipynb_checkpoints"))
        (scratch / "notebooks").mkdir(exist_ok=True)
        os.environ["KWNB_RUNS_DIR"] = str(scratch / "runs")
        jobs = []
        for path in paths:
            inside = scratch / "notebooks" / path.name if path.resolve().parent == (REPO / "notebooks") else path
            jobs.append((str(path.relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path),
                         nbformat.read(inside if inside.exists() else path, as_version=4), inside.parent))
        if args.stand_in or not paths:
            if not paths:
                print("no notebooks in notebooks/: measuring the stand-ins", file=sys.stderr)
            jobs += [(label, nb, scratch / "notebooks") for label, nb in stand_ins().items()]
        rows = []
        for label, notebook, cwd in jobs:
            print(f"running {label} ...", file=sys.stderr, flush=True)
            rows.append(measure(label, notebook, cwd, args.timeout))
    total = psutil.virtual_memory().total
    print(f"Machine: {psutil.cpu_count()} CPUs, {total / 1024 ** 3:.0f} GiB; Python {sys.version.split()[0]}; "
          f"KWNB_OFFLINE={os.environ['KWNB_OFFLINE']}. Binder gives about 2 GB.\n")
    print(table(rows))
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
