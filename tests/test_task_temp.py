"""Every local task's temporary folder is the user's own (kwnb/machine/task_temp.py), unless the user
set TMPDIR; a folder of that name made by someone else is not used. tests/test_hub_network.py runs a
TensorFlow task as a fresh user and finds nothing of it in the shared /tmp."""
from __future__ import annotations

import json
import os
import stat
import tempfile
import textwrap

import pytest

import kwnb
from kwnb.machine import task_temp

SHOW = textwrap.dedent("""
    import json, os, stat, tempfile
    folder = os.environ.get("TMPDIR", "")
    with tempfile.NamedTemporaryFile() as handle:
        made = handle.name
    print("SEEN " + json.dumps({"tmpdir": folder, "temp": os.environ.get("TEMP"), "tmp": os.environ.get("TMP"),
                                "gettempdir": tempfile.gettempdir(), "made": made,
                                "mode": oct(stat.S_IMODE(os.stat(folder).st_mode)), "owner": os.stat(folder).st_uid}))
""")


def seen_by_tasks(tmp_path, **options) -> list[dict]:
    (tmp_path / "show.py").write_text(SHOW)
    run = kwnb.launch(tmp_path / "show.py", n=2, cwd=tmp_path, runs_dir=tmp_path / "runs", timeout=60, **options)
    assert run.wait(60) == [0, 0], run.summary()
    return [json.loads(next(line for line in run.logs(i).splitlines() if line.startswith("SEEN "))[5:])
            for i in range(2)]


def test_a_tasks_temporary_folder_is_the_users_own(tmp_path, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    expected = os.path.join(tempfile.gettempdir(), f"kwnb-{os.geteuid()}")
    for seen in seen_by_tasks(tmp_path):
        assert seen["tmpdir"] == seen["temp"] == seen["tmp"] == seen["gettempdir"] == expected, seen
        assert os.path.dirname(seen["made"]) == expected  # tempfile writes there
        assert seen["mode"] == "0o700" and seen["owner"] == os.geteuid()


def test_a_tmpdir_the_user_set_is_kept(tmp_path):
    own = tmp_path / "mine"
    own.mkdir()
    for seen in seen_by_tasks(tmp_path, env={"TMPDIR": str(own)}):
        assert seen["tmpdir"] == seen["gettempdir"] == str(own) and seen["temp"] is None, seen


def test_someone_elses_folder_of_that_name_is_not_used(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder that another user owns")
    squatted = tmp_path / f"kwnb-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    os.chown(squatted, 4321, 4321)  # made first by another user, to read what lands in it
    chosen = task_temp.private_folder(str(tmp_path))
    assert chosen != str(squatted) and os.path.dirname(chosen) == str(tmp_path)
    assert stat.S_IMODE(os.stat(chosen).st_mode) == 0o700 and os.stat(chosen).st_uid == os.geteuid()
    assert task_temp.private_folder(str(tmp_path)) == chosen  # the same one for this process's next runs
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / f"kwnb-{os.geteuid()}").mkdir(mode=0o755)
    assert task_temp.private_folder(str(loose)) == str(loose / f"kwnb-{os.geteuid()}")
    assert stat.S_IMODE(os.stat(loose / f"kwnb-{os.geteuid()}").st_mode) == 0o700  # closed if it was open
