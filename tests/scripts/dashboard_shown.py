"""A 2-task run's dashboard built and displayed by this interpreter's ipywidgets (8 in the main venv, 7 in
the Colab one), in an IPython shell: prints as JSON what it displayed and its tabs' titles as set.
Usage: python dashboard_shown.py FOLDER"""
import json
import sys
from pathlib import Path

import ipywidgets
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import kwnb
from kwnb.notebook.dashboard import settle
from kwnb.notebook.show import show_run
from kwnb.notebook.widgets_compat import tab_titles
from kwnb.notebook.dashboard import dashboard_for

folder = Path(sys.argv[1])
InteractiveShell.instance()
script = folder / "hello.py"
script.write_text("import time\nprint('hello', flush=True)\ntime.sleep(1)\n")
run = kwnb.launch(script, n=2, name="hello", runs_dir=folder / "runs", cwd=folder, network="host", warm=False)
with capture_output() as shown:
    show_run(run)
run.wait(120)
settle(run)
board = dashboard_for(run)
print(json.dumps({"ipywidgets": ipywidgets.__version__, "titles": tab_titles(board.tabs),
                  "titles_synced": board.tabs.get_state().get("titles" if hasattr(board.tabs, "titles") else "_titles"),
                  "model_id": board.widget.model_id, "printed": shown.stdout,
                  "outputs": [output.data for output in shown.outputs], "codes": run.exit_codes}))
