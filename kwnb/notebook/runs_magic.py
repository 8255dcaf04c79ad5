"""`%kw_runs` and `%kw_show`: the runs kept on disk, and any one of them shown as its dashboard, after a
kernel restart as well (engine/records/past.py reads the folders)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .. import api
from ..errors import KwnbError


@magics_class
class PastRunMagics(Magics):
    @line_magic
    @magic_arguments()
    @argument("--all", action="store_true", help="every run folder, not only the newest of each name")
    def kw_runs(self, line):
        """The runs on disk (.kwnb/runs, or $KWNB_RUNS_DIR), newest first: name, when, status, tasks,
        duration. Without --all, the newest folder of each name (what %kw_show NAME opens)."""
        from ..engine.records.past import list_runs, listing_line, no_runs_line

        args = parse_argstring(self.kw_runs, line)
        listings = list_runs(newest_per_name=not args.all)
        if not listings:
            print(no_runs_line())
        live = {Path(run.dir).resolve(): run for run in api.runs()}
        for listing in listings:
            run = None if listing.problem else live.get(listing.folder.resolve())
            if run is not None and not run.done:  # its folder has no result yet: this kernel knows better
                listing = dataclasses.replace(listing, status=run.status, duration=run.elapsed)
            print(listing_line(listing))

    @line_magic
    @magic_arguments()
    @argument("run", help="a run name (its newest folder) or a run folder")
    def kw_show(self, line):
        """Show a run's dashboard: a run of this kernel live, a past one as it ended (kwnb.open_run)."""
        from ..engine.records.past import open_run
        from .show import show_live, show_run

        ref = parse_argstring(self.kw_show, line).run
        live = [run for run in api.runs() if run.name == ref or _same_folder(run.dir, ref)]
        if live:
            show_live(live[-1])  # on Colab, a run that goes on is followed from this cell
            return
        try:
            past = open_run(ref)
        except KwnbError as error:
            raise UsageError(str(error)) from None
        show_run(past)  # what the folder lacks is on its banner and in its summary: not printed again


def _same_folder(folder, ref: str) -> bool:
    """A run of this kernel given by its folder, however written (relative, with a slash, its run.json):
    shown live, not read back as a run that 'is still going elsewhere'."""
    path = Path(ref).expanduser()
    path = path.parent if path.name == "run.json" else path
    try:
        return path.resolve() == Path(folder).resolve()
    except OSError:
        return False
