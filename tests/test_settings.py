"""Launch settings as one value (kwnb/engine/live/settings.py): what kwnb.launch, Run, %%kw_worker and `kwnb run`
take, with the defaults declared once and the same errors as Run's own keyword arguments gave."""
from __future__ import annotations

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest

import kwnb
from kwnb import cli
from kwnb.backends.local import LocalLauncher
from kwnb.engine.live.run import Run
from kwnb.engine.live.settings import DEFAULTS, LaunchSettings
from kwnb.errors import OptionError
from kwnb.options import LAUNCH_ARGUMENTS, add_launch_arguments, launch_options, split_script_args

BEHAVE = Path(__file__).parent / "scripts" / "behave.py"


def test_an_unknown_keyword_raises_what_python_raised_for_run():
    with pytest.raises(TypeError, match=r"^launch\(\) got an unexpected keyword argument 'bogus'$"):
        kwnb.launch(BEHAVE, n=2, bogus=1)
    with pytest.raises(TypeError, match=r"^Run.__init__\(\) got an unexpected keyword argument 'nn'$"):
        Run(BEHAVE, nn=2)


def test_settings_are_checked_when_made():
    with pytest.raises(OptionError, match="on_failure must be one of"):
        LaunchSettings(on_failure="retry")
    with pytest.raises(OptionError, match="stall_after must be"):
        LaunchSettings(stall_after=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.timeout = 5


def test_a_run_keeps_its_settings_and_the_attributes_users_read(tmp_path):
    run = Run(BEHAVE, 3, "kept", timeout=30, on_failure="restart", max_restarts=1, stall_after=0, args="--sleep 1",
              runs_dir=tmp_path / "runs", launcher=LocalLauncher(network="host", warm=False))
    assert run.settings == LaunchSettings(n=3, name="kept", timeout=30, on_failure="restart", max_restarts=1,
                                          stall_after=0, args="--sleep 1", runs_dir=tmp_path / "runs",
                                          launcher=run.launcher)
    assert run.args == ["--sleep", "1"] and len(run.workers) == 3 and run.name == "kept"
    for name, value in (("timeout", 30), ("on_failure", "restart"), ("max_restarts", 1), ("stall_after", 0)):
        with pytest.warns(DeprecationWarning, match=rf"^Run\.{name} will be removed: use run\.settings\.{name}, "):
            assert getattr(run, name) == value  # the copies earlier versions kept, read from the settings
        assert name not in dir(run)
    run.stop()


def test_the_terminal_and_the_magic_default_to_the_settings_defaults():
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    options = launch_options(parser.parse_args([]))
    for name in set(options) - {"launcher"}:  # the launcher is made from --backend's default, "local"
        assert options[name] == getattr(DEFAULTS, name), name
    assert len(options) > 10 and isinstance(options["launcher"], LocalLauncher)
    assert set(options) <= {f.name for f in dataclasses.fields(LaunchSettings)}


# ----- the three entry points, made from the one declaration ------------------------------------------------
def launch_parameters() -> dict:
    return dict(list(inspect.signature(kwnb.launch).parameters.items())[1:])  # after `script`


def parser_defaults(parser: argparse.ArgumentParser, own: set) -> dict:
    """Each launch option of a parser by where it is stored, with its default (the command's own left out)."""
    return {action.dest: action.default for action in parser._actions if action.dest not in own}


def test_the_magic_the_terminal_and_launch_take_the_same_options_with_the_same_defaults():
    from kwnb.api import BACKEND_ONLY
    from kwnb.notebook.magics import KwnbMagics

    fields = {f.name: f.default for f in dataclasses.fields(LaunchSettings)}
    parameters = launch_parameters()
    assert list(parameters) == [*fields, *BACKEND_ONLY]  # every option, in the declaration's order
    assert {name: p.default for name, p in parameters.items() if name in fields} == fields
    assert all(p.kind is p.KEYWORD_ONLY for name, p in parameters.items() if name not in ("n", "name"))
    run_parser = cli.build_parser()._subparsers._group_actions[0].choices["run"]
    magic = parser_defaults(KwnbMagics.kw_worker.parser, {"help", "file", "wait"})
    terminal = parser_defaults(run_parser, {"help", "script", "quiet", "all"})
    assert magic == terminal
    assert set(magic) <= set(parameters) and set(magic) >= set(BACKEND_ONLY)  # the backends' own options too
    for name, default in magic.items():
        assert default == parameters[name].default, name  # warm: --cold stores False, unset is None in all three
    assert set(fields) - set(magic) == {"cwd", "files", "stop_grace", "chief_grace", "evaluator_grace", "runs_dir",
                                        "keep_lines", "on_end", "outputs"}  # documented as from Python only


def test_every_option_is_shown_by_the_magics_help_kwnb_run_help_and_help_of_launch(capsys):
    from kwnb.notebook.magics import KwnbMagics

    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    terminal, magic, python = capsys.readouterr().out, KwnbMagics.kw_worker.__doc__, kwnb.launch.__doc__
    for args, kwargs in LAUNCH_ARGUMENTS:
        help_words = " ".join(kwargs["help"].replace("%%", "%").split()[:6])
        for text in (terminal, magic, python):
            assert args[-1] in text and help_words in " ".join(text.split()), (args, text[:60])
    flat = " ".join(python.split())
    for name, parameter in launch_parameters().items():
        assert f" {name} (" in flat, name  # each keyword documented, as `name (its flags, or from Python only): ...`
    assert "cwd (from Python only): the tasks' working directory" in flat
    assert "[-- SCRIPT_ARGS ...]" in terminal and "main.py -n 2 -- --epochs 3" in " ".join(magic.split())
    assert "the words after their `--` are `args` here" in flat


def test_a_new_option_is_one_field(monkeypatch):
    """Walking the declaration makes the flags and launch's keyword: a field added with `option` is in all three."""
    from kwnb import api
    from kwnb import options as options_module
    from kwnb.engine.live import settings

    extra = dataclasses.field(default=7, metadata=dataclasses.fields(LaunchSettings)[0].metadata | {
        "flags": ("--extra-knob",), "help": "a knob (default {default})", "metavar": "K", "parsing": {"type": int}})
    extra.name = "extra_knob"
    monkeypatch.setattr(settings, "declared_options", lambda: iter([*dataclasses.fields(LaunchSettings), extra]))
    monkeypatch.setattr(options_module, "declared_options", settings.declared_options)
    monkeypatch.setattr(api, "declared_options", settings.declared_options)
    assert api.launch_signature().parameters["extra_knob"].default == 7
    assert "extra_knob (--extra-knob K): a knob (default 7)" in api.launch_doc()
    parser = argparse.ArgumentParser()
    for args, kwargs in options_module.arguments():
        parser.add_argument(*args, **kwargs)
    assert parser.parse_args(["--extra-knob", "9"]).extra_knob == 9
    assert parser.parse_args([]).extra_knob == 7
    assert "a knob (default 7)" in parser.format_help()


def test_the_script_args_after_a_double_dash():
    assert split_script_args(["main.py", "-n", "2", "--", "--epochs", "3", "--", "x"]) == (
        ["main.py", "-n", "2"], ["--epochs", "3", "--", "x"])
    assert split_script_args(["main.py", "-n", "2"]) == (["main.py", "-n", "2"], [])
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    assert launch_options(parser.parse_args([]), ["--epochs", "3"])["args"] == ["--epochs", "3"]
    assert launch_options(parser.parse_args(["--args", "'--epochs 3'"]))["args"] == "--epochs 3"
    with pytest.raises(OptionError, match="after -- or with --args, not both"):
        launch_options(parser.parse_args(["--args", "x"]), ["y"])


def test_a_python_caller_gets_the_same_checks_named_by_keyword():
    with pytest.raises(OptionError, match="^max_restarts must be 0 or more, not -1$"):
        LaunchSettings(max_restarts=-1)
    with pytest.raises(OptionError, match="^failure_grace must be 0 or more seconds, not -2$"):
        kwnb.launch(BEHAVE, failure_grace=-2)
    with pytest.raises(OptionError, match="^timeout must be positive, not 0$"):
        LaunchSettings(timeout=0)
    with pytest.raises(OptionError, match="--partition only apply with --backend slurm"):
        kwnb.launch(BEHAVE, partition="debug")


def test_tab_completion_offers_every_option():
    from IPython import get_ipython
    from IPython.core.completer import provisionalcompleter
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython() or get_ipython()  # start_ipython gives the shell to its first caller only
    shell.user_ns["kwnb"] = kwnb
    line = 'kwnb.launch("main.py", '  # one completion, with nothing typed yet: every keyword is offered
    with provisionalcompleter():
        offered = {c.text for c in shell.Completer.completions(line, len(line))}
    assert {f"{name}=" for name in launch_parameters()} <= offered
    line += "failure_g"
    with provisionalcompleter():
        assert [c.text for c in shell.Completer.completions(line, len(line))] == ["failure_grace="]


def test_every_keyword_of_launch_reaches_the_runs_settings(tmp_path):
    given = dict(ps=0, env={"A": "1"}, args="--sleep 1", cwd=tmp_path, timeout=30, on_failure="keep", max_restarts=0,
                 failure_grace=7.5, stall_after=0, stop_grace=1.0, chief_grace=2.0, evaluator_grace=4.0,
                 network="host", warm=False, runs_dir=tmp_path / "runs", keep_lines=10)
    run = kwnb.launch(BEHAVE, 1, "every", **given)
    try:
        assert run.settings == LaunchSettings(n=1, name="every", **given)
        assert (run.launcher.network, run.launcher.warm, run.settings.failure_grace) == ("host", False, 7.5)
    finally:
        run.stop()
