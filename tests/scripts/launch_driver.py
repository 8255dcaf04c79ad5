"""A stand-in for a notebook kernel, for the watchdog test in tests/test_run.py.

Launches behave.py (sleeping, each worker with a child in its process group) on two workers,
prints one JSON line with the run folder and worker pids, then sleeps until the test SIGKILLs it.
argv: runs_dir
"""
import json
import sys
import time
from pathlib import Path

import kwnb

script = Path(__file__).with_name("behave.py")
run = kwnb.launch(script, n=2, name="watchdog", runs_dir=sys.argv[1], args=["--sleep", "300", "--child", "group"])
print(json.dumps({"dir": str(run.dir), "pids": [w.pid for w in run.workers]}), flush=True)
time.sleep(600)
