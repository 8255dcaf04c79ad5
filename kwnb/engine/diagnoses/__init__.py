"""Diagnoses: what a run's tasks are doing wrong, one sentence each (diagnosis.py defines one).
diagnose.py runs the pass, holds the table of kinds (KINDS) and the cluster-level kinds; peers.py the
kinds about a task's peers; training_faults.py the kinds of training that runs; oom.py tells an
out-of-memory kill from another SIGKILL; stacks.py reads a live task's stacks.

May import tasks/ and readers/, never a run: a new diagnosis is one function here that takes a Look
(diagnosis.py) and returns a Diagnosis, a list of them or None, plus its row in KINDS and in docs/diagnoses.md.
"""
