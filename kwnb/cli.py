"""`kwnb run main.py -n 2`: the same engine from a terminal, with worker output prefixed by task."""
from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time

from .backends.catalog import RAY_ADDRESS
from .engine.live.cluster import tf_configs
from .engine.readers.output import Lines
from .engine.tasks.status import Status
from .errors import KwnbError
from .export import add_export_arguments, export_options, export_run, write_manifest
from .options import CLUSTER_SHAPE, SCRIPT_ARGS_HELP, add_launch_arguments, launch_options, split_script_args
from .task.runfolder import find_run_dir


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kwnb", description="Run multi-worker TensorFlow training locally.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start SCRIPT on N local workers and follow it to the end",
                              usage="kwnb run [options] SCRIPT [-- SCRIPT_ARGS ...]", epilog=SCRIPT_ARGS_HELP)
    run.add_argument("script")
    add_launch_arguments(run)
    run.add_argument("-q", "--quiet", action="store_true", help="print only the summary")
    run.add_argument("--all", action="store_true", help="also print TensorFlow's runtime lines (I0000 ..., oneDNN)")
    config = commands.add_parser("tf-config", help="print the TF_CONFIG each task of a local cluster gets")
    add_launch_arguments(config, CLUSTER_SHAPE)
    config.add_argument("--index", type=int, default=None, metavar="I", help="only task I (0 is the chief)")
    export = commands.add_parser("export", help="write Kubernetes objects for a run: an Indexed Job (--to job) or a Kubeflow TFJob (--to tfjob)")
    export.add_argument("run", help="run folder, or run name (its newest folder in .kwnb/runs or $KWNB_RUNS_DIR)")
    add_export_arguments(export)
    export.add_argument("-o", "--output", default=None, metavar="FILE", help="write to FILE (default: print it)")
    doctor = commands.add_parser("doctor", help="check that a run can work here, and how well: one line per check, each "
                                 "warning with its fix; exit code 1 when a run could not work")
    add_launch_arguments(doctor, ("python", "launcher"))
    doctor.add_argument(*RAY_ADDRESS[0], **RAY_ADDRESS[1])
    runs = commands.add_parser("runs", help="list the runs on disk (.kwnb/runs or $KWNB_RUNS_DIR), newest first")
    runs.add_argument("--all", action="store_true", help="every run folder, not only the newest of each name")
    show = commands.add_parser("show", help="print the summary of a past run (a run name or a run folder)")
    show.add_argument("run")
    return parser


def past_command(args) -> int:
    """`kwnb runs [--all]` and `kwnb show RUN`: what engine/records/past.py reads from the run folders."""
    from .engine.records.past import list_runs, listing_line, no_runs_line, open_run

    if args.command == "runs":
        listings = list_runs(newest_per_name=not args.all)
        for listing in listings:
            print(listing_line(listing))
        if not listings:
            print(no_runs_line(), file=sys.stderr)
        return 0
    try:
        past = open_run(args.run)
    except KwnbError as error:
        print(f"kwnb: {error}", file=sys.stderr)
        return 2
    print(past.summary())
    return 0


class TerminalOutput:
    """`kwnb run`'s terminal: an output of every task's reader (engine/readers/output.py), given to the run when it
    is made. Every finished line, prefixed by its task; TensorFlow's runtime lines only with `all`, else counted.

    The supervisor thread hands it each read's lines under the run's state lock, so it only queues them; the main
    thread prints them (`print_queued`): a terminal that blocks (`kwnb run | less`) holds up no one else."""

    def __init__(self, all: bool = False):
        self.all = all
        self.folded = 0  # runtime lines not printed
        self._queued: queue.SimpleQueue = queue.SimpleQueue()

    def __call__(self, task_id, lines: Lines) -> None:
        if lines.finished:
            self._queued.put((f"[{task_id.type} {task_id.index}] ", lines))

    def print_queued(self, out) -> None:
        while True:
            try:
                prefix, lines = self._queued.get_nowait()
            except queue.Empty:
                break
            if not self.all:
                self.folded += len(lines.runtime)
            out.write("".join(prefix + line + "\n" for line, runtime in lines.lines() if self.all or not runtime))
        out.flush()


def follow(run, terminal: TerminalOutput, out=None) -> None:
    """Print what `terminal` (one of the run's outputs) is given, and the diagnoses, until the run ends; then how
    many runtime lines were left out."""
    out = out or sys.stdout  # looked up now: sys.stdout may have been replaced since import
    drain = lambda: terminal.print_queued(out)
    told: set = set()

    def diagnoses() -> None:  # each one once, and again when its words change (a kill, then recovered)
        for diagnosis in list(run.diagnoses):
            if (id(diagnosis), diagnosis.message) not in told:
                told.add((id(diagnosis), diagnosis.message))
                out.write(f"kwnb: {diagnosis.message}\n")

    while not run.done:
        drain()
        diagnoses()
        time.sleep(0.2)
    drain()
    diagnoses()
    if terminal.folded:
        out.write(f"kwnb: {terminal.folded} TensorFlow runtime lines not shown (--all shows them; the logs keep them)\n")


def export_command(args) -> int:
    """`kwnb export RUN --to job|tfjob --image IMAGE [-o FILE]`: the YAML on stdout, or in FILE."""
    try:
        exported = export_run(find_run_dir(args.run), **export_options(args))
        path = write_manifest(exported, args.output) if args.output else None
    except KwnbError as error:
        print(f"kwnb: {error}", file=sys.stderr)
        return 2
    for note in exported.notes:  # stderr, so that stdout stays a clean manifest
        print(f"kwnb: {note}", file=sys.stderr)
    if path is None:
        sys.stdout.write(exported.yaml)
    else:
        print(f"Wrote {path}: {exported.kind} {exported.name!r} ({len(exported.objects)} objects)")
        print(f"Start it with: kubectl apply -f {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `kwnb runs | head` closed the pipe: end quietly, as other commands do
        # Python's recipe (docs of `signal`, "Note on SIGPIPE"): point stdout at devnull so that its flush
        # at exit raises nothing more; a run still going is stopped by kwnb's exit handlers.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command ended by a closed pipe


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    own, script_args = split_script_args(argv) if argv[:1] == ["run"] else (argv, [])
    args = build_parser().parse_args(own)
    if args.command == "export":
        return export_command(args)
    if args.command == "doctor":
        from . import doctor

        found = doctor.checks(args.python, backend=args.launcher, address=args.address)
        print(doctor.report(found))
        return doctor.exit_code(found)
    if args.command in ("runs", "show"):
        return past_command(args)
    try:
        if args.command == "tf-config":
            for config in tf_configs(args.n, args.ps, args.index, chief=args.chief, evaluator=args.evaluator):
                print(json.dumps(config))
            return 0
        from .api import launch
        from .engine.readers.tensorboard_import import use_tensorflow_stub

        use_tensorflow_stub()  # reading event files then needs no TensorFlow in this process (0.2 s, not 2.5)

        terminal = None if args.quiet else TerminalOutput(all=args.all)
        run = launch(args.script, **launch_options(args, script_args), outputs=[terminal] if terminal else [])
    except KwnbError as error:
        print(f"kwnb: {error}", file=sys.stderr)
        return 2
    try:
        if terminal is None:
            run.wait()
        else:
            follow(run, terminal)
    except KeyboardInterrupt:
        run.stop(reason="interrupted (Ctrl-C)")
    run.wait()
    print(run.summary())
    return 0 if run.status == Status.FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
