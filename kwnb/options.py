"""Launch options for `%%kw_worker` (IPython magic_arguments) and `kwnb run` (argparse), made by walking
their one declaration, LaunchSettings' fields (engine/live/settings.py), plus each backend's own options
as the backends' index declares them (kwnb/backends/catalog.py): no backend is imported to list them.

Kept as plain (args, kwargs) pairs so that this module needs no IPython. Words after `--` go to the script
(`%%kw_worker main.py -n 2 -- --epochs 3`, `kwnb run main.py -- --lr 0.1`), as `--args "..."` does.
"""
from __future__ import annotations

import argparse
import dataclasses

from .backends import argument_dest, backend_arguments, make_launcher
from .engine.live.settings import check_values, declared_options, help_of, spelled
from .errors import OptionError

SCRIPT_ARGS_HELP = "words after -- are the script's own arguments, as with --args: main.py -n 2 -- --epochs 3"


def argument_of(option: dataclasses.Field) -> tuple[tuple, dict]:
    """One option as argparse's (args, kwargs): its flags, stored under its field's name, with its default."""
    meta = option.metadata
    parsing = {key: value() if key == "choices" and callable(value) else value
               for key, value in meta["parsing"].items()}
    kwargs = dict(dest=option.name, default=option.default, help=help_of(option).replace("%", "%%"), **parsing)
    if meta["metavar"]:
        kwargs["metavar"] = meta["metavar"]
    return meta["flags"], kwargs


def user_options(names: tuple[str, ...] | None = None) -> list[dataclasses.Field]:
    """The options a learner sets from the magic and the CLI (those with flags), or the ones `names` lists."""
    return [option for option in declared_options()
            if option.metadata["flags"] and (names is None or option.name in names)]


def arguments(names: tuple[str, ...] | None = None) -> list[tuple[tuple, dict]]:
    return [argument_of(option) for option in user_options(names)]


LAUNCH_ARGUMENTS: list[tuple[tuple, dict]] = [*arguments(), *backend_arguments()]
CLUSTER_SHAPE = ("n", "ps", "chief", "evaluator")  # what `tf-config` and %kw_tf_config take of them


def add_launch_arguments(parser: argparse.ArgumentParser, names: tuple[str, ...] | None = None) -> None:
    """Every launch option (or those `names` lists, without the backends' own) as arguments of `parser`."""
    for args, kwargs in (LAUNCH_ARGUMENTS if names is None else arguments(names)):
        parser.add_argument(*args, **kwargs)


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """kwnb's own words, and the script's: those after the first `--`."""
    if "--" not in argv:
        return list(argv), []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def launch_options(namespace: argparse.Namespace, script_args: list[str] | tuple = ()) -> dict:
    """Keyword arguments for `kwnb.launch` from parsed options, `script_args` the words after `--`."""
    values = {option.name: getattr(namespace, option.name) for option in user_options()}
    for option in user_options():
        if option.metadata["convert"]:
            values[option.name] = option.metadata["convert"](values[option.name])
    check_values(values, spelled)
    if script_args:
        if values["args"]:
            raise OptionError("give the script's arguments after -- or with --args, not both")
        values["args"] = list(script_args)
    backend_options = {argument_dest(args, kwargs): getattr(namespace, argument_dest(args, kwargs))
                       for args, kwargs in backend_arguments()}
    values["launcher"] = make_launcher(values["launcher"], **backend_options)
    return values
