"""Diagnoses: what a run's tasks are doing wrong, one sentence each (diagnosis.py defines one).
diagnose.py runs the pass and holds the cluster-level kinds; training_faults.py the kinds of training
that runs; oom.py tells an out-of-memory kill from another SIGKILL; stacks.py reads a live task's stacks.

May import tasks/ and readers/, never a run: a new diagnosis is one function here that takes values
and returns a Diagnosis or None, plus its row in docs/diagnoses.md.
"""
