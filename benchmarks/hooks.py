"""Where the benchmarks reach into kwnb's internals, in one table.

Much of the benchmarks' code runs as strings in a Jupyter kernel (kernel.py's cells), and some of it
wraps or replaces one of kwnb's attributes for a measurement. An import graph sees neither, and a full
run takes 45 minutes, so a name kwnb moves would surface only there, or not at all: setting a
constant that no longer exists just adds a new one, and the benchmark measures the default. Every
such name is a Hook here; the code strings are built from these, and tests/test_benchmark_hooks.py
imports each module and finds each attribute.
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Hook:
    """`module`'s `attribute` (dotted within the module: "Dashboard.refresh", "POOL.status"), which
    benchmark modules use it, and why."""

    module: str
    attribute: str
    used_by: tuple[str, ...]
    why: str

    @property
    def owner(self) -> str:
        """What holds the attribute: "Dashboard" for "Dashboard.refresh", "" for a module's own name."""
        return self.attribute.rpartition(".")[0]

    @property
    def name(self) -> str:
        return self.attribute.rpartition(".")[2]

    @property
    def path(self) -> str:
        return f"{self.module}.{self.attribute}"

    def import_line(self, alias: str) -> str:
        """A line of code that imports the hook's module as `alias`, for the kernel's cells."""
        return f"import {self.module} as {alias}"


def owner_of(hook: Hook):
    """What holds the hooked attribute (its module, a class, an object), imported now."""
    target = importlib.import_module(hook.module)
    for part in hook.owner.split(".") if hook.owner else ():
        target = getattr(target, part)
    return target


@contextlib.contextmanager
def patched(hook: Hook, value):
    """The hooked attribute set to `value` for the block, then as it was. A name kwnb no longer has
    raises AttributeError instead of being created, which would measure kwnb's default in silence."""
    owner = owner_of(hook)
    saved = getattr(owner, hook.name)
    setattr(owner, hook.name, value)
    try:
        yield
    finally:
        setattr(owner, hook.name, saved)


DASHBOARD, RUN, TASK = "kwnb.notebook.dashboard", "kwnb.engine.live.run", "kwnb.engine.tasks.task"
CURVES = "kwnb.notebook.curves_view"
SUPERVISOR, RUN_ENGINE = "kwnb.engine.live.supervisor", "kwnb.engine.live.run_engine"
SCREEN, WARM, LOCAL = "kwnb.engine.readers.screen", "kwnb.backends.warm", "kwnb.backends.local"

# Patched or wrapped for a measurement.
BUSY_SHARE = Hook("kwnb.backends.warm_room", "BUSY_SHARE", ("firstcell", "rerun"),
                  "set to inf to turn the warm pool's wait for quiet CPUs off (in the kernel, and here)")
DASHBOARD_REFRESH = Hook(DASHBOARD, "Dashboard.refresh", ("logpath", "profile"),
                         "wrapped in the kernel: when a line first shows in the log widget; the dashboard's CPU")
DASHBOARD_LOGS = Hook(DASHBOARD, "Dashboard.logs", ("logpath",), "the log widgets whose HTML the latency wrapper reads")
DASHBOARD_RUN = Hook(DASHBOARD, "Dashboard.run", ("logpath",), "the latency wrapper times only the run named 'latency'")
DASHBOARD_CURVES = Hook(CURVES, "CurvesView._draw_png", ("profile",),
                        "wrapped: the curves' CPU, in the thread that draws them (not the dashboard's since 2026-11-26)")
RUN_SUPERVISE = Hook(SUPERVISOR, "Supervisor.supervise", ("profile",), "wrapped: the supervisor thread's CPU")
RUN_REFRESH = Hook(RUN_ENGINE, "RunEngine.refresh", ("profile",), "wrapped: one supervisor poll's CPU")
RUN_FINISH = Hook(SUPERVISOR, "Supervisor._finish", ("profile",),
                  "wrapped: the run's end (on_end callbacks, pictures, summary)")
TASK_OBSERVE = Hook(TASK, "Task.observe", ("profile",), "wrapped: log reads, poll and port probe of one task")
DESCENDANTS = Hook(LOCAL, "LocalProcess._remember_descendants", ("profile",), "wrapped: the descendant scan")
FOLLOWER_READ = Hook("kwnb.engine.readers.follow", "FileFollower.read_new", ("profile",),
                     "wrapped, and called alone: reading a log's new bytes")
SCREEN_FEED = Hook(SCREEN, "TerminalScreen.feed_text", ("profile",), "wrapped, and called alone: the screen")
METRICS_FEED = Hook("kwnb.engine.readers.metrics", "MetricsParser.take", ("profile",),
                    "wrapped: the metrics parser, given whole pieces by each task's reader")
LIVE_CURVES = Hook(CURVES, "LiveCurves", ("patches",),
                   "replaced by the curves as drawn before LiveCurves, for section 5's A/B (profile.kernel_ab)")
CURVES_CPU_SHARE = Hook(CURVES, "CURVES_CPU_SHARE", ("patches",), "uncapped for the same A/B")
LIVE_CURVES_PNG = Hook(CURVES, "live_curves_png", ("patches",),
                       "answers None for the same A/B: its before side draws in the kernel, as before the painter")

# Called or read from the kernel's cells, or by name from the benchmarks' own process.
SETTLE = Hook(DASHBOARD, "settle", ("kernel",), "waits for the dashboard's last redraw before the kernel's CPU is read")
TASK_SCREEN = Hook(TASK, "Task.screen", ("kernel",), "a task's screen, for the lines it saw")
SCREEN_TOTAL_LINES = Hook(SCREEN, "TerminalScreen.total_lines", ("kernel",),
                          "lines read into the dashboard (section 3: none missing)")
TASK_PORT_OPEN_AT = Hook(TASK, "Task.port_open_at", ("kernel", "bringup"), "when kwnb saw a task's port open")
TASK_ADDRESS = Hook(TASK, "Task.address", ("kernel", "bringup"), "the ports the benchmark's own probe polls")
RUN_DONE = Hook(RUN, "Run.done", ("kernel", "bringup", "rerun", "load", "keras3_jax"),
                "whether a run ended before the timeout")
RUN_STARTED_AT = Hook(RUN, "Run.started_at", ("kernel", "load"), "the run's start, for times since it")
RUN_ENDED_AT = Hook(RUN, "Run.ended_at", ("kernel", "bringup", "rerun", "keras3_jax"),
                    "every process exited (the whole run's end)")
NETWORK_CHOSEN = Hook(LOCAL, "LocalLauncher.chosen", ("firstcell", "rerun"), "the network a run got")
POOL_STATUS = Hook(WARM, "POOL.status", ("firstcell", "rerun"), "the warm interpreters: ready, pid, PSS")
POOL_REFUSED = Hook(WARM, "POOL.refused", ("firstcell", "rerun"), "why the pool is not full")
POOL_CAP_REASON = Hook(WARM, "POOL.cap_reason", ("firstcell",), "the pool's cap and why")
POOL_STOP = Hook(WARM, "POOL.stop", ("rerun",), "empties the pool, so that a round starts cold")
RUNTIME_LINES = Hook("kwnb.engine.readers.tf_messages", "count_runtime_lines", ("profile",),
                     "called alone: the runtime-line count's cost")
SCANNER_FEED = Hook("kwnb.engine.readers.tf_messages", "TfLogScanner.feed", ("profile",),
                    "called alone: TensorFlow's message scanner's cost")
CURVES_FIGURE = Hook("kwnb.pictures.plotting", "curves_figure", ("patches",), "the before-LiveCurves drawing")
PNG_BYTES = Hook("kwnb.pictures.plotting", "png_bytes", ("patches",), "the before-LiveCurves drawing")
THREAD_ENV = Hook("kwnb.machine.task_env", "thread_variables", ("threads",), "kwnb's thread variables, set on bare Popen for section 8")
TASK_SIGNALS = Hook(TASK, "Task.signals", ("load",), "what a task's log said, for when it joined")
CONNECTED_AT = Hook(TASK, "Signals.connected_at", ("load",), "when a task joined the cluster")

HOOKS = (BUSY_SHARE, DASHBOARD_REFRESH, DASHBOARD_LOGS, DASHBOARD_RUN, DASHBOARD_CURVES, RUN_SUPERVISE, RUN_REFRESH,
         RUN_FINISH, TASK_OBSERVE, DESCENDANTS, FOLLOWER_READ, SCREEN_FEED, METRICS_FEED, LIVE_CURVES,
         CURVES_CPU_SHARE, SETTLE, TASK_SCREEN, SCREEN_TOTAL_LINES, TASK_PORT_OPEN_AT, TASK_ADDRESS, RUN_DONE,
         RUN_STARTED_AT, RUN_ENDED_AT, NETWORK_CHOSEN, POOL_STATUS, POOL_REFUSED, POOL_CAP_REASON, POOL_STOP,
         RUNTIME_LINES, SCANNER_FEED, CURVES_FIGURE, PNG_BYTES, THREAD_ENV, TASK_SIGNALS, CONNECTED_AT)
