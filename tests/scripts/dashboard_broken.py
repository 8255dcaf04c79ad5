"""The dashboard cannot be built (a Tab with neither ipywidgets 8's `titles` nor 7's `set_title`; issue 38 saw
ipywidgets 7 without the first):
`%%kw_worker` starts nothing and says why in one line; a Run displayed anyway shows its text account and goes
on, stoppable, and `%kw_show` shows the same. Prints what happened as JSON. Usage: python dashboard_broken.py FOLDER"""
import json
import os
import sys
from pathlib import Path

import ipywidgets
import psutil
from IPython.core.interactiveshell import InteractiveShell
from IPython.display import display
from IPython.utils.capture import capture_output

import kwnb


class TabWithoutTitles(ipywidgets.Box):
    """A container of pages with no way to title them."""


folder = Path(sys.argv[1])
os.chdir(folder)
shell = InteractiveShell.instance()
shell.extension_manager.load_extension("kwnb")
ipywidgets.Tab = TabWithoutTitles  # what the dashboard builds from here on fails


def tasks_of(name):
    return [p.pid for p in psutil.Process().children(recursive=True) if any(name in part for part in p.cmdline())]


with capture_output() as cell:
    result = shell.run_cell("%%kw_worker sleepy.py -n 2\nimport time\ntime.sleep(60)\n")
report = {"error": f"{type(result.error_in_exec).__name__}: {result.error_in_exec}", "runs": len(kwnb.runs()),
          "tasks": tasks_of("sleepy.py"), "cell_stdout": cell.stdout}
run = kwnb.launch("sleepy.py", n=2, name="shown", network="host", warm=False)
with capture_output() as shown:
    display(run)
report.update(shown_stdout=shown.stdout, shown=[sorted(output.data) for output in shown.outputs],
              account="kwnb-static" in "".join(output.data.get("text/html", "") for output in shown.outputs),
              tasks_while_shown=len(tasks_of("sleepy.py")))
with capture_output() as magic:
    result = shell.run_cell("%kw_show shown")
report.update(kw_show_error=repr(result.error_in_exec), kw_show_stdout=magic.stdout,
              kw_show_account="kwnb-static" in "".join(output.data.get("text/html", "") for output in magic.outputs))
run.stop()
report.update(status=run.status, tasks_after_stop=tasks_of("sleepy.py"))
print(json.dumps(report))
