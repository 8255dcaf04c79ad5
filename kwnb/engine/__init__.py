"""The engine: clusters, runs and their tasks, run folders, log following, metrics, summaries.

Imports neither IPython nor ipywidgets (tests/test_layout.py checks it), so the notebook layer
(kwnb/notebook/) and the terminal (kwnb/cli.py) are views over the same runs. Imports go one way:
views -> engine -> backends' base and kwnb/task/ (standard library only).
"""
