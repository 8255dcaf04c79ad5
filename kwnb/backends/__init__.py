"""Ways of starting a cluster's processes, one class per way, found by name as ipyparallel finds
its launchers: `--backend local` is kwnb.backends.local.LocalLauncher, `--backend slurm` is
kwnb.backends.slurm.SlurmLauncher (catalog.py), and other packages add theirs through the
entry-point group `kwnb.backends`. The base (base.py) names none of them; this index imports a
backend only when a run asks for it (listing their options imports none of kwnb's own).
"""
from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import entry_points

from ..errors import OptionError
from .base import Launcher, LaunchError, TaskLaunch, TaskProcess
from .catalog import BUILTIN, Backend

__all__ = ["ENTRY_POINT_GROUP", "Backend", "Launcher", "LaunchError", "TaskLaunch", "TaskProcess", "backends",
           "find_launcher_class", "backend_arguments", "argument_dest", "make_launcher"]

ENTRY_POINT_GROUP = "kwnb.backends"


@functools.cache
def backends() -> dict[str, Backend]:
    """Every backend by name: kwnb's own, then those other installed packages declare (kwnb's win a clash)."""
    found = dict(BUILTIN)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in found:
            continue
        try:
            declared = entry.load()
        except Exception:  # a broken plug-in must not break %load_ext or `kwnb run`: it is left out
            logging.getLogger("kwnb.backends").warning("backend %r (%s) could not be loaded", entry.name,
                                                       entry.value, exc_info=True)
            continue
        if isinstance(declared, Backend):
            found[entry.name] = declared
        elif isinstance(declared, type) and issubclass(declared, Launcher):
            found[entry.name] = Backend(entry.value, tuple(declared.arguments))
    return found


def find_launcher_class(backend: str) -> type[Launcher]:
    known = backends()
    if backend not in known:
        raise OptionError(f"backend must be one of {', '.join(known)}, not {backend!r}")
    module, _, name = known[backend].launcher.partition(":")
    return getattr(importlib.import_module(module), name)


def backend_arguments() -> list[tuple[tuple, dict]]:
    """Every backend's own options, for the launch options of the magic and the CLI (imports no backend)."""
    return [argument for backend in backends().values() for argument in backend.arguments]


def make_launcher(backend: str = "local", **options) -> Launcher:
    """The launcher for `--backend`, with its own options (e.g. Slurm's partition); unset ones are left out."""
    cls = find_launcher_class(backend)
    given = {key: value for key, value in options.items() if value not in (None, [], ())}
    foreign = [key for key in given if key not in _flags(backends()[backend])]
    if foreign:
        owners = {key: (flag, name) for name, other in backends().items() for key, flag in _flags(other).items()}
        said = ", ".join(owners[key][0] if key in owners else key for key in foreign)
        others = " or ".join(sorted({owners[key][1] for key in foreign if key in owners})) or "another backend"
        raise OptionError(f"{said} only apply with --backend {others}")
    return cls(**given)


def _flags(backend: Backend) -> dict[str, str]:
    """A backend's options: constructor keyword -> command-line flag."""
    return {argument_dest(args, kwargs): args[-1] for args, kwargs in backend.arguments}


def argument_dest(args: tuple, kwargs: dict) -> str:
    """The attribute argparse stores an option in, as it derives it: --sbatch-arg -> sbatch_arg."""
    return kwargs.get("dest") or args[-1].lstrip("-").replace("-", "_")
