"""Helpers for the browser and Binder tests: a throw-away JupyterLab, a memory measurement script."""
