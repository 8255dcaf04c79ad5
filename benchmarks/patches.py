"""Changes to kwnb that the profile suggests, applied as monkeypatches to measure their effect.

kwnb itself is not edited here: each patch is applied inside one process (this one, or the
benchmark's kernel) for the runs labelled "patched", and undone right after. The notes describe
kwnb as it was when they were written; where kwnb has since adopted a change, the patch is
harmless and "as is" and "patched" measure the same.

1. MetricsParser._scan (kwnb/metrics.py) runs its three-way regex over every character of every
   chunk. Every match lies inside one "\\n"-terminated line that contains "/" (a progress line,
   "12/100 ...") or "Epoch", so lines with neither can be dropped first; the matches are the same
   (one corner differs: the custom-loop pattern's `\\s*` may cross a newline, e.g. "Epoch 3" then
   ", loss: 1" on the next line, which the filter no longer joins).
2. LocalProcess.poll (kwnb/launchers.py) calls psutil's children(recursive=True) on every poll
   (10 a second per worker); psutil reads /proc/<pid>/stat of every process on the machine for
   each call. Remembering descendants at most once a second per worker keeps the guarantee for
   any child that lives longer than a second.
3-6. See below: reading a worker's output to the end after it exits; probing the port until it
   opens; rendering the dashboard's curves less often; running the script without runpy.
"""
from __future__ import annotations

import time
from pathlib import Path

_saved: dict[str, object] = {}


def _prefiltered_scan(original):
    def _scan(self, text: str) -> None:
        if "/" not in text and "Epoch" not in text:
            return
        pieces = text.split("\n")
        last = pieces.pop()
        kept = "".join(piece + "\n" for piece in pieces if "/" in piece or "Epoch" in piece)
        if "/" in last or "Epoch" in last:
            kept += last
        if kept:
            original(self, kept)

    return _scan


def apply_scan_prefilter() -> None:
    from kwnb.metrics import MetricsParser

    if "scan" not in _saved:
        _saved["scan"] = MetricsParser._scan
        MetricsParser._scan = _prefiltered_scan(_saved["scan"])


def undo_scan_prefilter() -> None:
    from kwnb.metrics import MetricsParser

    if "scan" in _saved:
        MetricsParser._scan = _saved.pop("scan")


def apply_descendant_throttle(interval: float = 1.0) -> None:
    from kwnb.launchers import LocalProcess

    if "descendants" in _saved:
        return
    original = _saved["descendants"] = LocalProcess._remember_descendants

    def _remember_descendants(self) -> None:
        now = time.monotonic()
        if now - getattr(self, "_bench_scanned_at", -interval) >= interval:
            self._bench_scanned_at = now
            original(self)

    LocalProcess._remember_descendants = _remember_descendants


def undo_descendant_throttle() -> None:
    from kwnb.launchers import LocalProcess

    if "descendants" in _saved:
        LocalProcess._remember_descendants = _saved.pop("descendants")


# 3. Worker._poll (kwnb/run.py) reads at most MAX_READ (4 MiB) once more when it sees the process has
#    exited, and the supervisor once more after that: whatever a worker wrote beyond that before
#    exiting never reaches the screen, the dashboard or the curves. Reading to the end fixes it.
def apply_drain_at_exit() -> None:
    from kwnb.run import Worker

    if "drain" in _saved:
        return
    original = _saved["drain"] = Worker._poll

    def _poll(self) -> bool:
        changed = original(self)
        if self.returncode is not None:
            while self._read_output():
                changed = True
        return changed

    Worker._poll = _poll


def undo_drain_at_exit() -> None:
    from kwnb.run import Worker

    if "drain" in _saved:
        Worker._poll = _saved.pop("drain")


# 4. Worker._poll stops probing the port once the worker has printed a line (TensorFlow prints
#    before it starts its server), so Worker.port_open_at mostly stays None. Probing until the port
#    opens (one refused connect per poll) sets it.
def apply_port_probe() -> None:
    from kwnb.run import Worker

    if "port" in _saved:
        return
    original = _saved["port"] = Worker._poll

    def _poll(self) -> bool:
        if self.port_open_at is None and self.returncode is None and self._process is not None and self.tf_config:
            self._port_accepts()
        return original(self)

    Worker._poll = _poll


def undo_port_probe() -> None:
    from kwnb.run import Worker

    if "port" in _saved:
        Worker._poll = _saved.pop("port")


# 5. Dashboard._refresh_curves (kwnb/dashboard.py) renders a matplotlib PNG every CURVES_SECONDS
#    (1.5 s) while the chief reports steps: the largest share of the kernel's CPU while it trains.
def apply_curves_interval(seconds: float = 5.0) -> None:
    import kwnb.dashboard as dashboard

    if "curves" not in _saved:
        _saved["curves"] = dashboard.CURVES_SECONDS
        dashboard.CURVES_SECONDS = seconds


def undo_curves_interval() -> None:
    import kwnb.dashboard as dashboard

    if "curves" in _saved:
        dashboard.CURVES_SECONDS = _saved.pop("curves")


# 6. kwnb/_bootstrap.py runs the script with runpy.run_path; under runpy the worker's
#    `import tensorflow` takes about 0.3 s longer (section 1's "kwnb.launch + proposed changes"
#    rows and the finding under the table). Compiling the script and exec'ing it in a fresh
#    `__main__` module, as benchmarks/_bootstrap_exec.py does, does not.
def apply_exec_bootstrap() -> None:
    import kwnb.launchers as launchers

    if "bootstrap" not in _saved:
        _saved["bootstrap"] = launchers.BOOTSTRAP
        launchers.BOOTSTRAP = str(Path(__file__).with_name("_bootstrap_exec.py"))


def undo_exec_bootstrap() -> None:
    import kwnb.launchers as launchers

    if "bootstrap" in _saved:
        launchers.BOOTSTRAP = _saved.pop("bootstrap")


ALL = [(apply_exec_bootstrap, undo_exec_bootstrap), (apply_scan_prefilter, undo_scan_prefilter), (apply_descendant_throttle, undo_descendant_throttle),
       (apply_drain_at_exit, undo_drain_at_exit), (apply_port_probe, undo_port_probe),
       (apply_curves_interval, undo_curves_interval)]


def apply_all() -> None:
    for apply, _ in ALL:
        apply()


def undo_all() -> None:
    for _, undo in reversed(ALL):
        undo()
