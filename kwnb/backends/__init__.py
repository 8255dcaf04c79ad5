"""Ways of starting a cluster's processes, one class per way, found by name as ipyparallel finds
its launchers: `--backend local` is kwnb.backends.local.LocalLauncher, `--backend slurm` is
kwnb.backends.slurm.SlurmLauncher. The base (base.py) names none of them; this index does, and
imports a backend only when it is asked for.
"""
from __future__ import annotations

import importlib

from ..errors import OptionError
from .base import Launcher, LaunchError, TaskLaunch, TaskProcess

__all__ = ["BACKENDS", "Launcher", "LaunchError", "TaskLaunch", "TaskProcess", "find_launcher_class",
           "backend_arguments", "argument_dest", "make_launcher"]

BACKENDS = {"local": "kwnb.backends.local:LocalLauncher", "slurm": "kwnb.backends.slurm:SlurmLauncher"}


def find_launcher_class(backend: str) -> type[Launcher]:
    if backend not in BACKENDS:
        raise OptionError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    module, _, name = BACKENDS[backend].partition(":")
    return getattr(importlib.import_module(module), name)


def backend_arguments() -> list[tuple[tuple, dict]]:
    """Every backend's own options, for the launch options of the magic and the CLI."""
    return [argument for backend in BACKENDS for argument in find_launcher_class(backend).arguments]


def make_launcher(backend: str = "local", **options) -> Launcher:
    """The launcher for `--backend`, with its own options (e.g. Slurm's partition); unset ones are left out."""
    cls = find_launcher_class(backend)
    given = {key: value for key, value in options.items() if value not in (None, [], ())}
    foreign = [key for key in given if key not in _flags(cls)]
    if foreign:
        owners = {key: (flag, name) for name in BACKENDS for key, flag in _flags(find_launcher_class(name)).items()}
        said = ", ".join(owners[key][0] if key in owners else key for key in foreign)
        others = " or ".join(sorted({owners[key][1] for key in foreign if key in owners})) or "another backend"
        raise OptionError(f"{said} only apply with --backend {others}")
    return cls(**given)


def _flags(cls: type[Launcher]) -> dict[str, str]:
    """A launcher's options: constructor keyword -> command-line flag."""
    return {argument_dest(args, kwargs): args[-1] for args, kwargs in cls.arguments}


def argument_dest(args: tuple, kwargs: dict) -> str:
    """The attribute argparse stores an option in, as it derives it: --sbatch-arg -> sbatch_arg."""
    return kwargs.get("dest") or args[-1].lstrip("-").replace("-", "_")
