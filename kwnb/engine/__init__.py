"""The engine: runs and their tasks, what they write, what goes wrong, and what is kept. One package per
concern, lowest first; each imports only those before it (tests/test_layout.py enforces it):

    readers/    a task's output as values: terminal screen, TensorFlow's messages, metric rows
    tasks/      one task: its process and state, vitals, statuses, roles
    diagnoses/  what goes wrong, one sentence each: values in, findings out
    records/    the snapshot every view renders, the summary, run.json and past runs
    live/       the running Run, its supervisor, the failure policy, the cluster's plan

Imports neither IPython nor ipywidgets, so the notebook layer (kwnb/notebook/) and the terminal
(kwnb/cli.py) are views over the same runs. Below the engine: backends/ and export/, machine/
(the session's limits and ports) and kwnb/task/ (standard library only). docs/architecture.md draws it.
"""
