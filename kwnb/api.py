"""The public entry points, `kwnb.launch`, `kwnb.get_run` and `kwnb.runs`: the engine's registry,
plus what every run started this way leaves in its folder at the end (kwnb/pictures/outputs.py).
"""
from __future__ import annotations

import os

from .engine.live.registry import get_run, runs
from .engine.live.registry import launch as _launch
from .engine.live.run import Run
from .pictures.outputs import write_outputs

__all__ = ["launch", "get_run", "runs"]


def launch(script: str | os.PathLike, n: int = 2, name: str | None = None, **options) -> Run:
    """Start `script` on `n` workers (plus `ps=K` parameter servers, a `chief=True` task, an `evaluator=True`
    sidecar) and return the Run at once.

    Options are Run's: ps, chief, evaluator, timeout, env, python, args, on_failure, max_restarts, gpus, launcher, ...
    """
    options["on_end"] = [*options.get("on_end", []), write_outputs]
    return _launch(script, n, name, **options)
