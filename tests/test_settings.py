"""Launch settings as one value (kwnb/engine/live/settings.py): what kwnb.launch, Run, %%kw_worker and `kwnb run`
take, with the defaults declared once and the same errors as Run's own keyword arguments gave."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

import kwnb
from kwnb.backends.local import LocalLauncher
from kwnb.engine.live.run import Run
from kwnb.engine.live.settings import DEFAULTS, LaunchSettings
from kwnb.errors import OptionError
from kwnb.options import add_launch_arguments, launch_options

BEHAVE = Path(__file__).parent / "scripts" / "behave.py"


def test_an_unknown_keyword_raises_what_python_raised_for_run():
    with pytest.raises(TypeError, match=r"^Run.__init__\(\) got an unexpected keyword argument 'bogus'$"):
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
    for name in ("n", "ps", "on_failure", "max_restarts", "stall_after"):
        assert options[name] == getattr(DEFAULTS, name), name
    assert set(options) <= {f.name for f in dataclasses.fields(LaunchSettings)}
