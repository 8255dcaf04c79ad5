"""Each process kwnb starts as a task or beside one (local and warm tasks, network helpers, Ray's task hosts) leads a
process group of its own, so that a stop reaches its children and a Ctrl-C meant for the terminal does not. Not a
session of its own: Linux shares CPU between sessions first (autogroups), and workers in their own sessions trained
5 % slower than workers sharing the launcher's session in a paired benchmark (benchmarks/README.md).

Python 3.11's `process_group=0` for subprocess; before 3.11, which lacks it, setpgrp() in the child before exec,
the same call."""
import os
import sys

OWN_PROCESS_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
