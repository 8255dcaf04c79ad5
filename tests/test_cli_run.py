"""`kwnb run` in a terminal (cli.py): every task's lines printed with its prefix, TensorFlow's runtime lines folded
into one count unless --all, all of it handed over by each task's one reader (engine/readers/output.py).

Plain-Python tasks: what is tested is the path of the lines, not TensorFlow.
"""
from __future__ import annotations

import re
from collections import Counter

from kwnb import cli
from kwnb.engine.readers import follow

SCRIPT = r"""import json, sys
index = json.loads(__import__("os").environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index} says hello")
print("I0000 00:00:1795460621.508971  7334 port.cc:153] oneDNN custom operations are on.")
sys.stdout.write(" 1/2 [==>...] - loss: 0.5\r 2/2 [=====] - loss: 0.4\n")
print("To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow")
print(f"worker {index} done", end="")  # a last line without its newline: a terminal shows it, and so does `kwnb run`
"""


def run_cli(tmp_path, capsys, monkeypatch, *flags: str) -> list[str]:
    (tmp_path / "chatty.py").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    code = cli.main(["run", "chatty.py", "-n", "2", "--network", "host", *flags])
    assert code == 0
    return capsys.readouterr().out.splitlines()


def prefixed(out: list[str]) -> list[str]:
    return [line for line in out if re.match(r"\[worker \d\] ", line)]


def test_lines_are_printed_prefixed_and_runtime_lines_counted(tmp_path, capsys, monkeypatch):
    out = run_cli(tmp_path, capsys, monkeypatch)
    for index in (0, 1):
        assert [line for line in prefixed(out) if line.startswith(f"[worker {index}]")] == [
            f"[worker {index}] worker {index} says hello", f"[worker {index}]  2/2 [=====] - loss: 0.45",  # 0.5 drawn over
            f"[worker {index}] worker {index} done"]  # ended by the task's end, as the log's reader ends it for every sink
    assert "kwnb: 4 TensorFlow runtime lines not shown (--all shows them; the logs keep them)" in out
    assert out.index("kwnb: 4 TensorFlow runtime lines not shown (--all shows them; the logs keep them)") < \
        next(i for i, line in enumerate(out) if line.startswith("kwnb run 'chatty': finished"))


def test_all_prints_the_runtime_lines_too(tmp_path, capsys, monkeypatch):
    out = run_cli(tmp_path, capsys, monkeypatch, "--all")
    assert len(prefixed(out)) == 10 and not any("not shown" in line for line in out)
    assert "[worker 1] I0000 00:00:1795460621.508971  7334 port.cc:153] oneDNN custom operations are on." in out
    assert "[worker 0] To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow" in out


def test_each_log_is_read_by_one_reader(tmp_path, capsys, monkeypatch):
    """The terminal is an output of each task's reader, not a second follower of the same files."""
    followed = Counter()
    made = follow.FileFollower.__init__

    def counted(self, path):
        followed[str(path)] += 1
        made(self, path)

    monkeypatch.setattr(follow.FileFollower, "__init__", counted)
    out = run_cli(tmp_path, capsys, monkeypatch)
    logs = {path: count for path, count in followed.items() if path.endswith(".log")}
    assert len(logs) == 2 and set(logs.values()) == {1}, followed
    assert len(prefixed(out)) == 6


def test_the_words_after_a_double_dash_and_args_reach_the_script(tmp_path, capsys, monkeypatch):
    """`kwnb run main.py -- --lr 0.1` passes what follows `--` to the script, as `--args "--lr 0.1"` still does."""
    (tmp_path / "argv.py").write_text("import sys\nprint('argv', sys.argv[1:])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KWNB_RUNS_DIR", str(tmp_path / "runs"))
    said = []
    for words in (["--", "--lr", "0.1", "two words"], ["--args", "--lr 0.2"]):
        assert cli.main(["run", "argv.py", "-n", "1", "--network", "host", *words]) == 0
        said += [line for line in capsys.readouterr().out.splitlines() if line.startswith("[worker 0] argv")]
    assert said == ["[worker 0] argv ['--lr', '0.1', 'two words']", "[worker 0] argv ['--lr', '0.2']"]
    assert cli.main(["run", "argv.py", "--args", "--lr 0.2", "--", "--lr", "0.1"]) == 2
    assert "after -- or with --args, not both" in capsys.readouterr().err
