"""IPython magics: thin wrappers that parse options, call the engine and display what it returns.

Every error the user can cause (a KwnbError) becomes one UsageError line, and nothing starts.
Loading them (`%load_ext kwnb`) imports neither the engine's processes nor matplotlib: those load
when a magic first needs them.
"""
from __future__ import annotations

import json
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.utils.process import arg_split  # how parse_argstring splits a line
from IPython.display import Image, display

from .. import api
from ..engine.live.cluster import tf_configs
from ..errors import KwnbError
from ..machine.sizes import format_size
from ..export import EXPORT_ARGUMENTS, export_options, export_run, write_manifest
from ..options import CLUSTER_SHAPE, LAUNCH_ARGUMENTS, arguments, launch_options, split_script_args
from ..task.runfolder import find_run_dir


TASK_HELP = "task: its position (0 is the chief; default 0) or its name, e.g. worker:1 or ps:0"


def _arguments(declared: list[tuple[tuple, dict]]):
    """A magic's arguments from their declaration as (args, kwargs) pairs (kwnb/options.py, kwnb/export/)."""
    def add(func):
        for args, kwargs in reversed(declared):
            func = argument(*args, **kwargs)(func)
        return func
    return add


def _export_dir(name: str) -> Path:
    """A run of this kernel by name, else a run folder (a path, or a name under the runs folder)."""
    if any(run.name == name for run in api.runs()):
        return api.get_run(name).dir
    try:
        return find_run_dir(name)
    except KwnbError as error:
        known = ", ".join(sorted({r.name for r in api.runs()})) or "none yet"
        raise UsageError(f"{error}; runs of this kernel: {known}") from None


def _run(name: str | None):
    try:
        return api.get_run(name or None)
    except KwnbError as error:
        raise UsageError(str(error)) from None


def _task(run, ref: str):
    """A task of the run from what the user typed: a position ('1') or a name ('ps:0', 'worker:1')."""
    try:
        return run.task(int(ref) if ref.lstrip("-").isdigit() else ref)
    except KwnbError as error:
        raise UsageError(str(error)) from None


def write_cell(path: str, cell: str, check_syntax: bool = True) -> Path:
    """Write a cell to a file as %%writefile does, refusing an empty or non-compiling cell first."""
    target = Path(path).expanduser()
    if not cell.strip():
        raise UsageError(f"the cell is empty: nothing to write to {path}")
    if check_syntax:
        try:
            compile(cell, f"<{target.name}>", "exec")  # a real path would make Python quote the old file
        except SyntaxError as error:
            text = (error.text or "").rstrip()
            raise UsageError(f"{target.name} line {error.lineno}: SyntaxError: {error.msg}"
                             + (f": {text.strip()}" if text else "")) from None
    if target.is_dir():
        raise UsageError(f"{path} is a directory")
    try:
        target.write_text(cell, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror or error}") from None
    return target


def history_rows(value) -> list[dict]:
    """Per-epoch rows from a Keras History, a {'loss': [...]} dict or a list of rows."""
    epochs = None
    if hasattr(value, "history") and isinstance(value.history, dict):  # a Keras History
        value, epochs = value.history, getattr(value, "epoch", None)
    if isinstance(value, dict):
        epochs = epochs or range(len(next(iter(value.values()), [])))
        return [{"epoch": e, **{k: float(v[i]) for k, v in value.items()}} for i, e in enumerate(epochs)]
    if isinstance(value, list) and all(isinstance(row, dict) for row in value):
        return [{"epoch": row.get("epoch", i), **row} for i, row in enumerate(value)]
    raise UsageError(f"cannot plot a {type(value).__name__}: give a run name or a Keras History")


@magics_class
class KwnbMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.job_files: list[Path] = []  # written with %%kw_file: part of every run's job
        self._told_notes: dict[str, set[str]] = {}  # by run folder: the notes printed as each run started

    @cell_magic
    @magic_arguments()
    @argument("file", help="where to write the cell (e.g. main.py); the run's name defaults to its stem")
    @_arguments(LAUNCH_ARGUMENTS)
    @argument("--wait", action="store_true", help="block until the run ends, then print its summary")
    def kw_worker(self, line, cell):
        """Write the cell to FILE and run it on N workers, each with its own TF_CONFIG: local processes,
        or one Slurm job with --backend slurm. The words after -- are the script's own arguments
        (%%kw_worker main.py -n 2 -- --epochs 3), as with --args "--epochs 3".

        Returns at once with a live dashboard (a tab per worker: status, elapsed time, progress,
        log; the chief's curves), unless --wait, or on Colab, where the cell follows the run until it ends
        (interrupting it stops the run; KWNB_LIVE chooses). The run is also available as kwnb.get_run(NAME).
        """
        own, _ = split_script_args(arg_split(line))  # split as every magic's line is (quotes kept)
        _, script_args = split_script_args(arg_split(line, posix=True))  # the script's words, as a shell gives them
        args = self.kw_worker.parser.parse_args(own)
        from .live_mode import live_mode
        from .show import DashboardUnavailable, check_widgets, follow_in_cell, show_run, stopped_if_interrupted

        try:
            options = launch_options(args, script_args)
            script = write_cell(args.file, cell)
            check_widgets()  # where the dashboard cannot be drawn, before any task starts
            in_cell = live_mode() == "cell"
            run = api.launch(script, files=list(self.job_files), **options)
        except KwnbError as error:
            raise UsageError(str(error)) from None
        except DashboardUnavailable as error:
            raise UsageError(f"the dashboard cannot be drawn here ({error}); nothing started") from None
        if in_cell:  # the front end paints only what this cell sends (live_mode.py)
            with stopped_if_interrupted(run):  # from the run's start, its notes included
                self._print_notes(run)
                follow_in_cell(run, summary_below=args.wait)
            if args.wait:
                self._print_summary(run)
            return None
        self._print_notes(run)
        if args.wait:
            show_run(run)
            if not self._wait_and_summarise(run):
                print(f"kwnb: interrupted; run {run.name!r} goes on (%kw_stop {run.name} stops it)")
            return None
        return run

    def _wait_and_summarise(self, run, timeout: float | None = None) -> bool:
        """Wait for the run, then print its summary; False if interrupted (nothing printed). Its dashboard is
        told first that the summary comes below, so that its final account, sent once, leaves it out."""
        from .dashboard import settle, summary_printed_below

        summary_printed_below(run)
        try:
            run.wait(timeout)
        except KeyboardInterrupt:
            summary_printed_below(run, False)
            return False
        if run.done:
            settle(run)
        else:
            summary_printed_below(run, False)  # the summary below is of a run still going: not its final one
        self._print_summary(run)
        return True

    def _print_notes(self, run) -> None:
        """The run's notes as it starts, each said once: its summary (%kw_wait) leaves them out."""
        told = self._told_notes.setdefault(str(run.dir), set())
        for note in run.notes:
            if note not in told:
                print(f"kwnb: {note}")
                told.add(note)

    def _print_summary(self, run) -> None:
        """The run's summary as text, less the notes printed as it started."""
        from ..engine.records.summary import format_summary

        print(format_summary(run.snapshot(), told=self._told_notes.get(str(run.dir), ())))

    @cell_magic
    @magic_arguments()
    @argument("file", help="where to write the cell, e.g. mnist_setup.py")
    def kw_file(self, line, cell):
        """Write a helper module, as %%writefile does, and remember it as part of the job."""
        path = write_cell(self._parse(self.kw_file, line).file, cell).resolve()
        if path not in self.job_files:
            self.job_files.append(path)
        print(f"Wrote {path.name} ({len(cell.splitlines())} lines)")

    @line_magic
    @magic_arguments()
    @argument("name", nargs="?", default=None, help="run name (default: the latest run)")
    @argument("--timeout", type=float, default=None, metavar="SECONDS", help="give up waiting after this long")
    def kw_wait(self, line):
        """Wait for a run to end and print its summary (exit codes, last metrics, where the logs are)."""
        args = self._parse(self.kw_wait, line)
        run = _run(args.name)
        if not self._wait_and_summarise(run, args.timeout):
            print(f"kwnb: stopped waiting; run {run.name!r} goes on")

    @line_magic
    @magic_arguments()
    @argument("name", nargs="?", default=None, help="run name (default: the latest run)")
    @argument("--all", action="store_true", help="stop every run of this kernel")
    def kw_stop(self, line):
        """Stop a run: TERM to every task and its children, KILL after a grace period."""
        args = self._parse(self.kw_stop, line)
        targets = [r for r in api.runs() if not r.done] if args.all else [_run(args.name)]
        for run in targets:
            run.stop()
            print(f"kwnb: {run.name!r} {run.status}; exit codes {run.exit_codes}")
        if not targets:
            print("kwnb: no run is going")

    @line_magic
    def kw_status(self, line):
        """One line per run of this kernel: name, status, exit codes, elapsed time, folder."""
        if line.strip():
            raise UsageError("%kw_status takes no arguments")
        runs = api.runs()
        if not runs:
            print("kwnb: no run has been started")
        for run in runs:
            codes = ", ".join("-" if c is None else str(c) for c in run.exit_codes)
            print(f"{run.name:<16} {run.status:<9} exit [{codes}]  {run.elapsed:7.1f} s  {run.dir}")

    @line_magic
    @magic_arguments()
    @argument("name", help="run name")
    @argument("task", nargs="?", default="0", help=TASK_HELP)
    @argument("--tail", type=int, default=None, metavar="N", help="only the last N lines")
    @argument("--all", action="store_true", help="include TensorFlow's runtime lines (I0000 ..., oneDNN, CUDA)")
    def kw_logs(self, line):
        """A task's log as a terminal shows it (progress bars drawn, not as raw fragments), without
        TensorFlow's C++ runtime lines unless --all (the log file keeps every byte)."""
        args = self._parse(self.kw_logs, line)
        run = _run(args.name)
        print(run.logs(_task(run, args.task).position, tail=args.tail, all=args.all))

    @line_magic
    @magic_arguments()
    @argument("--stop", action="store_true", help="end every warm interpreter and the kept import now")
    def kw_pool(self, line):
        """The warm interpreters (TensorFlow already imported, for a script that uses it) the next run starts in:
        how many, their memory and age, the pool's cap and why, and the import kept from the last run for the next
        one when warm starts are off; --stop empties the pool and ends the kept import."""
        from ..backends import shared_import
        from ..backends.warm import IDLE_SECONDS, POOL

        args = self._parse(self.kw_pool, line)
        if args.stop:
            kept = " and the kept import" if shared_import.end_kept() else ""
            print(f"kwnb: ended {POOL.stop()} warm interpreter(s){kept}")
            return
        idle, kept = POOL.status(), shared_import.kept_status()
        if kept:
            print(f"kwnb: the last run's import is kept for the next run in the same environment: pid {kept['pid']}, "
                  f"{', '.join(kept['imports'])}, {format_size(kept['pss'])} (PSS), ends in {kept['left']:.0f} s")
        if not POOL.enabled():
            print("kwnb: warm starts are off (KWNB_WARM=0)")
            return
        print(f"kwnb: pool cap {POOL.cap_text()}")
        if not idle:
            print("kwnb: no warm interpreter" + (f" ({POOL.refused})" if POOL.refused else
                                                 ": the pool fills when a run ends and no other run is going"))
        elif POOL.refused:
            print(f"kwnb: {POOL.refused}")
        for warm in idle:
            state = ("ready, imported " if warm["ready"] else "importing ") + (", ".join(warm["imports"]) or "nothing")
            print(f"pid {warm['pid']:>7}  {state:<36} {format_size(warm['pss']):>9}  {warm['age']:5.0f} s old")
        if idle:
            print(f"kwnb: {len(idle)} warm, {format_size(sum(w['pss'] for w in idle))} in all (PSS); emptied after "
                  f"{IDLE_SECONDS / 60:.0f} idle minutes and at exit")

    @line_magic
    @magic_arguments()
    @_arguments(arguments(("python",)))
    def kw_doctor(self, line):
        """Check that a run can work here, and how well (as `kwnb doctor`): TensorFlow and its companions, the
        session's limits, whether a 2-worker run fits, the warm pool, the network; each warning with its fix."""
        from .. import doctor

        print(doctor.report(doctor.checks(self._parse(self.kw_doctor, line).python)))

    @line_magic
    @magic_arguments()
    @argument("name", help="run name")
    @argument("task", nargs="?", default=None, help="one task, by position or name (default: every live task)")
    @argument("--native", action="store_true", help="add native frames from py-spy, where it is installed")
    def kw_stack(self, line):
        """Every thread's Python stack of each live task: where a stuck task is blocked.

        Each task dumps its stacks itself (faulthandler, on a signal kwnb sends), so no privileges are needed.
        """
        args = self._parse(self.kw_stack, line)
        run = _run(args.name)
        position = _task(run, args.task).position if args.task else None
        dumps = run.stacks(position, native=args.native)
        if not dumps:
            print(f"kwnb: no task of {run.name!r} can show its stacks now (it has ended, or has not started yet)")
        for at, text in dumps.items():
            print(f"===== {run.workers[at].id} ({run.workers[at].where}) =====\n{text.rstrip()}")  # a pid, or job and node

    @line_magic
    @magic_arguments()
    @argument("name", help="run name")
    @argument("task", help=TASK_HELP)
    def kw_kill(self, line):
        """SIGKILL one task, as if its machine were preempted; the run's --on-failure policy follows."""
        self._control_one_task(self._parse(self.kw_kill, line), "kill", "killed")

    @line_magic
    @magic_arguments()
    @argument("name", help="run name")
    @argument("task", help=TASK_HELP)
    def kw_restart(self, line):
        """Start one task again with the same TF_CONFIG (its log gets a separator line, not a new file)."""
        self._control_one_task(self._parse(self.kw_restart, line), "restart", "restarted")

    @staticmethod
    def _control_one_task(args, action: str, done: str) -> None:
        run = _run(args.name)
        task = _task(run, args.task)
        try:
            getattr(run, action)(task.position)
        except KwnbError as error:
            raise UsageError(str(error)) from None
        print(f"kwnb: {done} {task.id} of {run.name!r}")

    @line_magic
    @magic_arguments()
    @argument("names", nargs="+", help="run names, or variables holding a Keras History (e.g. a baseline fit)")
    def kw_plot(self, line):
        """Overlay the per-epoch curves of runs (their chiefs) and of Keras Histories from the kernel."""
        series = {}
        for name in self._parse(self.kw_plot, line).names:
            if any(r.name == name for r in api.runs()):
                run = _run(name)
                series[f"{name} ({sum(w.task_type in ('chief', 'worker') for w in run.workers)} workers)"] = {
                    "epochs": run.history()}
            elif name in self.shell.user_ns:
                series[name] = {"epochs": history_rows(self.shell.user_ns[name])}
            else:
                _run(name)  # raises the "no run named" error
        from ..pictures.painter import figure_png

        png = figure_png(series)  # drawn by the kernel's painter, which the dashboard may already run
        if not png:
            print("kwnb: nothing to plot yet (no epoch has finished)")
            return
        display(Image(png))

    @line_magic
    @magic_arguments()
    @_arguments(arguments(CLUSTER_SHAPE))
    @argument("--index", type=int, default=None, metavar="I", help="only the task at position I")
    def kw_tf_config(self, line):
        """Print the TF_CONFIG each task of a local cluster of this shape gets (ports free now)."""
        args = self._parse(self.kw_tf_config, line)
        try:
            for config in tf_configs(args.n, args.ps, args.index, chief=args.chief, evaluator=args.evaluator):
                print(json.dumps(config, indent=None))
        except KwnbError as error:
            raise UsageError(str(error)) from None

    @line_magic
    @magic_arguments()
    @argument("name", help="a run of this kernel, or a run folder")
    @_arguments(EXPORT_ARGUMENTS)
    @argument("-o", "--output", default=None, metavar="FILE", help="where to write (default: NAME-TARGET.yaml here, e.g. main-job.yaml)")
    def kw_export(self, line):
        """Write Kubernetes objects for a run: a plain Indexed Job and headless Service (--to job, no operator
        needed) or a Kubeflow TFJob (--to tfjob).

        The files (the script and %%kw_file modules) go into a ConfigMap in the same YAML. Prints where
        the file is and the kubectl line that starts the job.
        """
        args = self._parse(self.kw_export, line)
        try:
            exported = export_run(_export_dir(args.name), **export_options(args))
            path = write_manifest(exported, args.output or f"{exported.run.name}-{args.to}.yaml")
        except KwnbError as error:
            raise UsageError(str(error)) from None
        for note in exported.notes:
            print(f"kwnb: {note}")
        print(f"Wrote {path}: {exported.kind} {exported.name!r} ({len(exported.objects)} objects)")
        print(f"Start it with: kubectl apply -f {path}")

    @staticmethod
    def _parse(magic, line):
        return parse_argstring(magic, line)

