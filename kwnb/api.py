"""The public entry points, `kwnb.launch`, `kwnb.get_run` and `kwnb.runs`: the engine's registry,
plus what every run started this way leaves in its folder at the end (kwnb/pictures/outputs.py).

`launch`'s signature and docstring are made from the one declaration of the launch options
(engine/live/settings.py) plus kwnb's backends' own options (backends/catalog.py), so that `help()`,
`inspect.signature` and tab completion show every option and a new option is one field there.
"""
from __future__ import annotations

import inspect
import os
import textwrap

from .backends import argument_dest, make_launcher
from .backends.catalog import BUILTIN
from .engine.live.registry import get_run, runs
from .engine.live.registry import launch as _launch
from .engine.live.run import Run
from .engine.live.settings import DEFAULTS, declared_options, help_of
from .errors import OptionError
from .pictures.outputs import write_outputs

__all__ = ["launch", "get_run", "runs"]

# kwnb's backends' own options by keyword, as (backend, args, kwargs); those that are no field of LaunchSettings
# are keywords of `launch` only, which makes the launcher with them.
BACKEND_OPTIONS = {argument_dest(args, kwargs): (backend, args, kwargs) for backend, declared in BUILTIN.items()
                   for args, kwargs in declared.arguments}
BACKEND_ONLY = [name for name in BACKEND_OPTIONS if name not in {option.name for option in declared_options()}]


def launch(script: str | os.PathLike, n: int = DEFAULTS.n, name: str | None = DEFAULTS.name, **options) -> Run:
    unknown = next((key for key in options if key not in launch.__signature__.parameters), None)
    if unknown is not None:  # what Python says of a keyword no signature takes
        raise TypeError(f"launch() got an unexpected keyword argument {unknown!r}")
    given = {key: options.pop(key) for key in BACKEND_ONLY if key in options}
    given = {key: value for key, value in given.items() if value not in (None, [], ())}
    if given:
        launcher = options.get("launcher", DEFAULTS.launcher)
        if not isinstance(launcher, str):
            raise OptionError(f"{', '.join(given)}: a backend's own options apply with launcher=NAME, not a Launcher")
        options["launcher"] = make_launcher(launcher, network=options.get("network"), warm=options.get("warm"),
                                            **given)
    options["on_end"] = [*(options.get("on_end") or []), write_outputs]
    return _launch(script, n, name, **options)


def launch_signature() -> inspect.Signature:
    """`launch(script, n, name, *, ps, chief, ...)`: the declaration's fields in order, then the backends' own."""
    script = inspect.Parameter("script", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str | os.PathLike")
    parameters, keyword_only = [script], inspect.Parameter.KEYWORD_ONLY
    for option in declared_options():
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if option.name in ("n", "name") else keyword_only
        parameters.append(inspect.Parameter(option.name, kind, default=option.default, annotation=option.type))
    for name in BACKEND_ONLY:
        _, args, kwargs = BACKEND_OPTIONS[name]
        parameters.append(inspect.Parameter(name, keyword_only, default=kwargs.get("default")))
    return inspect.Signature(parameters, return_annotation="Run")


def _flags(args: tuple, kwargs: dict) -> str:
    return "/".join(args) + (f" {kwargs['metavar']}" if kwargs.get("metavar") else "")


def _entry(name: str, said: str, help: str) -> str:
    return textwrap.fill(f"{name} ({said}): {help}", 108, initial_indent="    ", subsequent_indent="        ")


def _backend_entry(name: str) -> str:
    backend, args, kwargs = BACKEND_OPTIONS[name]
    return _entry(name, f"{_flags(args, kwargs)}, backend {backend}", kwargs["help"])


def launch_doc() -> str:
    """`launch`'s docstring: every option with how the magic and `kwnb run` spell it, from the declaration."""
    entries = []
    for option in declared_options():
        flags = option.metadata["flags"]
        if option.name in BACKEND_OPTIONS:
            entries.append(_backend_entry(option.name))
        else:
            entries.append(_entry(option.name, _flags(flags, option.metadata) if flags else "from Python only",
                                  help_of(option)))
    entries += [_backend_entry(name) for name in BACKEND_ONLY]
    return "\n".join([
        "Start `script` on `n` workers and return the Run at once: what `%%kw_worker` and `kwnb run` do, with",
        "the same options (their flags in brackets; the words after their `--` are `args` here).",
        "",
        "The local backend's --network and --cold are `network` and `warm=False`; another package's backend",
        "takes its options through `launcher=kwnb.backends.make_launcher(NAME, ...)`.",
        "",
        "Options:", *entries])


launch.__signature__ = launch_signature()  # what help(), inspect.signature and tab completion show
launch.__doc__ = launch_doc()
