"""One drawing process per kernel: the dashboard's live curves, `%kw_plot`'s figure and a run's end-of-run
pictures drawn with matplotlib in a subprocess, so that the kernel never imports it.

Importing matplotlib and a first draw cost a kernel about 0.5 CPU-s and 40 MB for good (issue 31: over a
200k-line run, 0.415 kernel CPU-s per 100k lines with that one-off, and 55 MB). The process starts when
the extension loads (`prepare`), or else at the first picture a kernel asks for, and lives until the
kernel ends (its stdin closes). It keeps each dashboard's `LiveCurves`, so a redraw costs what it cost
in the kernel, plus a pipe's copy of the PNG.

The pipe: a request is one JSON line; the answer one JSON line, {"size": n, "cpu": s} (s: the draw's CPU
seconds, which the dashboard's throttle counts as its own) or {"error": text}, then n bytes. Whoever
asks gets None when the process cannot draw and draws in its own process instead: a drawing that raised
is asked elsewhere again once; a process that could not start, ended or took longer than ANSWER_TIMEOUT
is not started again.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ANSWER_TIMEOUT = 60.0  # seconds for one answer, the first one's matplotlib import included (about 1 s)
# The training a picture shows comes first: at niceness 10 the painter gets about a tenth of what a task
# gets where they share a core. At 0, a first cell's first live curves (about 0.3 CPU-s) made its 2 tasks'
# 30 steps about 0.3 s slower on 2 cores (0.9 s against 0.6 s, issue 31). Its answers then come later while
# the tasks train: the dashboard asks from a thread of its own (notebook/curves_view.py).
NICE = 10


class Painter:
    """The kernel's side of the drawing process: one request at a time, whatever thread asks."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._broken = False

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def prepare(self) -> None:
        """Start the process now, without waiting for it: its matplotlib import (about 1 CPU-s) is then done
        before the first picture is asked for, not while a first run's tasks start (issue 31)."""
        with self._lock:
            if not self._broken and not self.running:
                try:
                    self._start()
                except OSError:
                    self._broken = True

    def ask(self, request: dict) -> tuple[bytes, float] | None:
        """The answer's bytes and the CPU seconds the drawing took; None where this process must draw."""
        try:
            line = json.dumps(request, default=float).encode() + b"\n"  # numpy's scalars as floats
        except (TypeError, ValueError):
            return None  # not plain data: drawn by the asker
        with self._lock:
            if self._broken:
                return None
            try:
                return self._exchange(line)
            except (OSError, ValueError, KeyError, TimeoutError):
                self._break()
                return None

    def _exchange(self, line: bytes) -> tuple[bytes, float] | None:
        process = self._process if self.running else self._start()
        process.stdin.write(line)
        process.stdin.flush()
        header = json.loads(_read_line(process.stdout, time.monotonic() + ANSWER_TIMEOUT))
        if "error" in header:
            return None
        return _read_exactly(process.stdout, header["size"], time.monotonic() + ANSWER_TIMEOUT), header["cpu"]

    def _start(self) -> subprocess.Popen:
        self._process = subprocess.Popen([sys.executable, "-m", "kwnb.pictures.painter"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=drawing_env(),
                                         bufsize=0)
        return self._process

    def _break(self) -> None:
        self._broken = True
        if self._process is not None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        """End the process (tests; a kernel's ends with it)."""
        with self._lock:
            if self._process is not None:
                self._process.stdin.close()
                self._process.wait(ANSWER_TIMEOUT)
                self._process = None


def drawing_env() -> dict:
    """The environment of a drawing subprocess: this one's, with the same kwnb, however it was found."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding kwnb/
    return dict(os.environ, MPLBACKEND="Agg",
                PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))


def _read_line(stream, deadline: float) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        line += _read_some(stream, 1, deadline)
    return line


def _read_exactly(stream, size: int, deadline: float) -> bytes:
    chunks, left = [], size
    while left:
        chunks.append(_read_some(stream, left, deadline))
        left -= len(chunks[-1])
    return b"".join(chunks)


def _read_some(stream, most: int, deadline: float) -> bytes:
    if not select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
        raise TimeoutError("the drawing process did not answer")
    chunk = os.read(stream.fileno(), most)
    if not chunk:
        raise OSError("the drawing process ended")
    return chunk


_painter = Painter()


def painter() -> Painter:
    """This process's painter (one per kernel)."""
    return _painter


def live_curves_png(key: str, title: str, series: dict) -> tuple[bytes | None, float] | None:
    """A dashboard's curves (None: nothing to draw yet) and the CPU seconds they cost (the painter's draw and
    this thread's side of the pipe), drawn by the painter; None where it cannot draw."""
    cpu = time.thread_time()
    answer = _painter.ask({"kind": "live", "key": key, "title": title, "series": series})
    return None if answer is None else (answer[0] or None, answer[1] + time.thread_time() - cpu)


def forget_live_curves(key: str) -> None:
    """A dashboard's run has ended: its figure is not needed any longer."""
    if _painter.running:
        _painter.ask({"kind": "forget", "key": key})


def figure_png(series: dict, title: str = "") -> bytes | None:
    """`curves_figure(series, title)` as PNG bytes (None: nothing to plot), drawn by the painter; in this
    process where it cannot draw."""
    answer = _painter.ask({"kind": "figure", "title": title, "series": series})
    if answer is not None:
        return answer[0] or None
    from .plotting import curves_figure, png_bytes

    figure = curves_figure(series, title=title)
    return None if figure is None else png_bytes(figure)


def draw_plan(plan: dict, start: bool = False) -> list[str] | None:
    """draw(plan) in the painter, if one is running or `start` says to start it (a start costs as much as a process
    of its own, which a process that draws again and again pays once); its notes, or None where it cannot draw."""
    if not (_painter.running or start):
        return None
    answer = _painter.ask({"kind": "plan", "plan": plan})
    return None if answer is None else json.loads(answer[0])


# ----- the drawing process ------------------------------------------------------------------------
def draw(plan: dict) -> list[str]:
    """Draw a plan's pictures (pictures/outputs.py drawing_plan, or a part of it) here; a note for each that
    could not be drawn."""
    notes = []
    try:
        from .plotting import save_curves

        if "curves" in plan:
            save_curves(plan["curves"]["series"], plan["curves"]["title"], Path(plan["curves"]["path"]))
    except Exception as error:  # curves are a bonus; a broken plot must not hide the result
        notes.append(f"could not save curves: {error}")
    try:
        from .timeline import save_timeline

        if plan.get("timeline", {}).get("data") is not None:
            save_timeline(plan["timeline"]["data"], plan["timeline"]["path"])
    except Exception as error:
        notes.append(f"could not save the timeline: {error}")
    return notes


def _answer(request: dict, live: dict) -> bytes:
    from . import plotting

    kind = request["kind"]
    if kind == "live":
        curves = live.setdefault(request["key"], plotting.LiveCurves(title=request["title"]))
        return curves.png(request["series"]) or b""
    if kind == "forget":
        live.pop(request["key"], None)
        return b""
    if kind == "figure":
        figure = plotting.curves_figure(request["series"], title=request["title"])
        return plotting.png_bytes(figure) if figure is not None else b""
    if kind == "plan":
        return json.dumps(draw(request["plan"])).encode()
    raise ValueError(f"unknown request {kind!r}")


def serve(requests=None, answers=None) -> None:
    """Answer requests until stdin closes."""
    requests, answers = requests or sys.stdin.buffer, answers or sys.stdout.buffer
    live: dict = {}
    for line in requests:
        cpu = time.process_time()
        try:
            body = _answer(json.loads(line), live)
            header = {"size": len(body), "cpu": time.process_time() - cpu}
        except Exception as error:  # noqa: BLE001 - the asker draws instead; the process keeps serving
            body, header = b"", {"error": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(header).encode() + b"\n" + body)
        answers.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel's interrupt is for the user's code, not its pictures
    os.nice(NICE)
    from .plotting import load_drawing

    load_drawing()  # before the first request: a one-off the dashboard's throttle must not take for a draw's cost
    serve()
