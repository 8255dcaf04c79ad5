"""Code that runs inside a task's own Python: standard library only.

A task may run under any `--python`, on a Slurm node, without kwnb's dependencies, so modules here
import only the standard library, `kwnb.task` and the dependency-free `kwnb.errors`
(tests/test_layout.py checks it in an interpreter started with -S, which has no site-packages).
The engine imports from here; never the other way.
"""
