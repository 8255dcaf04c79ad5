"""The magics in a real IPython shell: options, bad input, and a real run end to end."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from IPython import get_ipython
from IPython.core.error import UsageError
from IPython.testing.globalipapp import start_ipython

import kwnb

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def ip():
    shell = start_ipython() or get_ipython()  # start_ipython gives the shell to its first caller only
    shell.run_line_magic("load_ext", "kwnb")
    return shell


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch, stop_leftover_runs):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path


BAD = [
    ("main.py -n 0", "at least 1"),
    ("main.py -n -1", "at least 1"),
    ("main.py -n abc", "invalid int value: 'abc'"),
    ("main.py -n 65", "at most 64"),
    ("main.py --bogus", "unrecognized arguments: --bogus"),
    ("main.py --env NOVALUE", "KEY=VALUE"),
    ("main.py --env 1X=2", "KEY=VALUE"),
    ("main.py --python /no/such/python", "Python interpreter not found"),
    ("missing_dir/main.py", "cannot write missing_dir/main.py"),
    ("main.py --on-failure maybe", "invalid choice: 'maybe'"),
    ("main.py --max-restarts -2", "--max-restarts must be 0 or more"),
    ("main.py --failure-grace -1", "--failure-grace must be 0 or more seconds"),
    ("main.py --args x -- y", "after -- or with --args, not both"),
]


@pytest.mark.parametrize("line, message", BAD)
def test_bad_options_are_one_clear_line_and_start_nothing(ip, in_tmp, line, message):
    before = len(kwnb.runs())
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        ip.run_cell_magic("kw_worker", line, "print('hello')\n")
    assert len(kwnb.runs()) == before
    assert not (in_tmp / "runs").exists()


def test_file_that_is_a_directory_is_refused(ip, in_tmp):
    (in_tmp / "adir").mkdir()
    with pytest.raises(UsageError, match="is a directory"):
        ip.run_cell_magic("kw_worker", "adir", "print('hello')\n")


def test_empty_cell_is_refused(ip, in_tmp):
    with pytest.raises(UsageError, match="empty"):
        ip.run_cell_magic("kw_worker", "main.py", "  \n\n")
    assert not (in_tmp / "main.py").exists()


def test_syntax_error_names_the_line_and_leaves_the_old_file(ip, in_tmp):
    (in_tmp / "main.py").write_text("print('old')\n")
    with pytest.raises(UsageError, match=r"main.py line 2: SyntaxError: .*x = \("):
        ip.run_cell_magic("kw_worker", "main.py", "import os\nx = (\n")
    assert (in_tmp / "main.py").read_text() == "print('old')\n"


def test_help_documents_every_option(ip):
    doc = ip.find_cell_magic("kw_worker").__doc__
    for option in ["-n", "--name", "--wait", "--timeout", "--env", "--python", "--args", "--ps", "--chief", "--evaluator",
                   "--on-failure", "--failure-grace", "--max-restarts"]:
        assert option in doc
    assert "this long after its tasks started (time a scheduler keeps them queued" in " ".join(doc.split())


def test_failure_grace_reaches_the_run(ip, in_tmp):
    """How long the others may go on after a task failed (notebook 06 gives TensorFlow its 10 s heartbeat)."""
    run = ip.run_cell_magic("kw_worker", "main.py -n 1 --failure-grace 12.5", "print('hello')\n")
    assert run.wait(60) == [0] and run.settings.failure_grace == 12.5
    assert ip.run_cell_magic("kw_worker", "main.py -n 1", "print('hello')\n").settings.failure_grace == 5.0


def test_the_words_after_a_double_dash_and_args_reach_the_script(ip, in_tmp):
    """`%%kw_worker main.py -n 1 -- --epochs 3` gives the script what follows `--`; `--args "..."` still works."""
    cell = "import sys\nprint('argv', sys.argv[1:])\n"
    dashed = ip.run_cell_magic("kw_worker", "main.py -n 1 --network host --name dashed -- --epochs 3 'two words' -n 2",
                               cell)
    quoted = ip.run_cell_magic("kw_worker", 'main.py -n 1 --network host --name quoted --args "--epochs 4"', cell)
    assert dashed.wait(60) == [0] and quoted.wait(60) == [0]
    assert len(dashed.workers) == 1 and dashed.args == ["--epochs", "3", "two words", "-n", "2"]
    assert "argv ['--epochs', '3', 'two words', '-n', '2']" in dashed.logs(0)
    assert "argv ['--epochs', '4']" in quoted.logs(0)


def test_run_end_to_end_in_a_shell(ip, in_tmp, capsys):
    ip.run_cell_magic("kw_file", "helper_mod.py", "GREETING = 'hi from helper'\n")
    source = "import helper_mod\nprint(helper_mod.GREETING)\n" + (SCRIPTS / "report_epochs.py").read_text()
    result = ip.run_cell_magic("kw_worker", "job.py -n 2 --wait --args 2 --env KWNB_TEST_FLAG=yes", source)
    out = capsys.readouterr().out
    assert result is None
    assert "kwnb run 'job': finished" in out and "exit codes: 0, 0" in out
    run = kwnb.get_run("job")
    assert run.exit_codes == [0, 0]
    assert [row["epoch"] for row in run.history()] == [0, 1]
    assert run.history()[1]["train_loss"] == pytest.approx(0.5) and run.history()[1]["lr"] == pytest.approx(0.02)
    assert (run.dir / "helper_mod.py").is_file() and (run.dir / "job.py").is_file()
    ip.run_line_magic("kw_logs", "job 1 --tail 2")
    ip.run_line_magic("kw_status", "")
    out = capsys.readouterr().out
    assert "hi from helper" in (run.dir / "worker-0.log").read_text()
    assert "task worker 1 done" in out and "job" in out and "finished" in out
    ip.run_line_magic("kw_wait", "job")
    assert "exit codes: 0, 0" in capsys.readouterr().out


def test_rerun_with_same_name_stops_the_previous_run(ip, in_tmp, capsys):
    sleeper = "import time\ntime.sleep(60)\n"
    first = ip.run_cell_magic("kw_worker", "sleepy.py -n 1", sleeper)
    second = ip.run_cell_magic("kw_worker", "sleepy.py -n 1", sleeper)
    assert first.done and first.status == "stopped" and first.workers[0].returncode is not None
    assert "stopped the previous run of 'sleepy'" in capsys.readouterr().out
    ip.run_line_magic("kw_stop", "sleepy")
    assert second.status == "stopped"


def test_unknown_names_and_indexes(ip, in_tmp):
    for magic, line in [("kw_wait", "nosuchrun"), ("kw_stop", "nosuchrun"), ("kw_logs", "nosuchrun"),
                        ("kw_kill", "nosuchrun 0"), ("kw_plot", "nosuchrun")]:
        with pytest.raises(UsageError, match="no run named 'nosuchrun'"):
            ip.run_line_magic(magic, line)
    ip.run_cell_magic("kw_worker", "quick.py -n 1 --wait", "print('x')\n")
    with pytest.raises(UsageError, match="tasks 0 to 0, not 3"):
        ip.run_line_magic("kw_logs", "quick 3")


def test_tf_config_magic(ip, capsys):
    ip.run_line_magic("kw_tf_config", "-n 3 --ps 1")
    configs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(3)] + [{"type": "ps", "index": 0}]
    # 3 workers, 1 ps and the coordinator's chief entry (the notebook coordinates ParameterServerStrategy)
    assert len({a for c in configs[:1] for addrs in c["cluster"].values() for a in addrs}) == 5
    assert sorted(configs[0]["cluster"]) == ["chief", "ps", "worker"]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    with pytest.raises(UsageError, match="--index must be between 0 and 1"):
        ip.run_line_magic("kw_tf_config", "-n 2 --index 2")


def test_plot_overlays_runs_and_kernel_histories(ip, in_tmp, capsys):
    ip.run_cell_magic("kw_worker", "plotme.py -n 1 --wait", (SCRIPTS / "report_epochs.py").read_text())
    ip.user_ns["baseline"] = {"train_loss": [1.2, 0.8, 0.6]}
    ip.run_line_magic("kw_plot", "plotme baseline")
    assert "nothing to plot" not in capsys.readouterr().out


def test_cli_bad_input_and_failure_exit_codes(tmp_path):
    env = {"KWNB_RUNS_DIR": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin"}
    bad = subprocess.run([sys.executable, "-m", "kwnb", "run", "nope.py", "-n", "0"], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.strip() == "kwnb: number of workers must be at least 1, not 0"
    (tmp_path / "fail.py").write_text("import sys\nprint('about to fail')\nsys.exit(3)\n")
    failed = subprocess.run([sys.executable, "-m", "kwnb", "run", "fail.py", "-n", "2"], cwd=tmp_path,
                            capture_output=True, text=True, env=env, timeout=60)
    assert failed.returncode == 1
    assert "[worker 1] about to fail" in failed.stdout and "exit codes: 3, 3" in failed.stdout


def test_a_runs_notes_are_printed_once_as_it_starts_and_not_again_in_its_summary(ip, monkeypatch, capsys):
    """The host-network note (another account here, and a ps run, which gets the host network) used to be
    printed as the run started, then again in the summary of `--wait` and of %kw_wait (issue 29)."""
    from kwnb.backends import local, network_choice
    from kwnb.machine.neighbours import Neighbours

    monkeypatch.delenv("KWNB_NETWORK", raising=False)
    monkeypatch.setattr(local, "neighbours", lambda: Neighbours(other_uids=(4242,)))
    monkeypatch.setattr(network_choice, "_told_host", False)
    from types import SimpleNamespace

    from kwnb.notebook import dashboard  # a terminal shell would print the dashboard's text view too: the
    monkeypatch.setattr(dashboard, "dashboard_for", lambda run: SimpleNamespace(show=lambda: None))  # cells' own
    monkeypatch.setattr(dashboard, "settle", lambda run: None)  # output is what is counted here
    ip.run_cell_magic("kw_worker", "serve.py -n 1 --ps 1 --wait", "import time\ntime.sleep(0.3)\n")
    started = capsys.readouterr().out
    assert started.count("other users of this machine can connect") == 1, started
    assert "kwnb run 'serve': finished" in started
    ip.run_line_magic("kw_wait", "serve")
    assert "other users of this machine can connect" not in capsys.readouterr().out
    assert "note: other users of this machine can connect" in kwnb.get_run("serve").summary()  # kept for later


def test_where_the_cell_follows_its_run_an_interrupt_before_the_dashboard_shows_stops_the_run(ip, monkeypatch, capsys):
    """Where the cell follows its run (Colab, KWNB_LIVE=cell), an interrupt that landed while the dashboard was
    being made, its widgets' first updates already sent, left the run going behind a red cell."""
    from kwnb.notebook import dashboard

    def interrupted(run, parent=None, follow=True):
        raise KeyboardInterrupt

    monkeypatch.setenv("KWNB_LIVE", "cell")
    monkeypatch.setattr(dashboard, "dashboard_for", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("kw_worker", "sleepy.py -n 2", "import time\ntime.sleep(60)\n")
    run = kwnb.get_run("sleepy")
    assert run.done and run.status == "stopped", run.status
    assert "kwnb: interrupted; stopping run 'sleepy'" in capsys.readouterr().out
