"""Public corpus programs, made at run time from a local snapshot of their repository: none of their code is
in this repository (their licences and size keep it out), only where it is and the few edits that make it
small and offline. A snapshot is a bare git directory `$KWNB_CORPUS_SNAPSHOTS/<owner>+<name>/repo` holding the
pinned commit (docs/testing.md, "The corpus", says how to make one); without it the entry is unavailable
and its test skips saying so.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(os.environ.get("KWNB_CORPUS_SNAPSHOTS", "/work/.mirror"))
# The offline MNIST: kwnb's 10,000-digit sample (kwnb/datasets), in load_data()'s structure.
SAMPLE = "__import__('kwnb.datasets.mnist').datasets.mnist.load_sample()"


class Unavailable(Exception):
    """No snapshot of the repository (or not at the commit) on this machine."""


@dataclass(frozen=True)
class Source:
    """One file of a program: a file of the repository, or a notebook's code cells joined (a cell that
    starts with `%%writefile NAME` is that file; IPython's `!` and `%` lines, at column 0, are left out)."""

    path: str
    cells: tuple[int, ...] = ()
    edits: tuple[tuple[str, str], ...] = ()  # (old, new), each old found exactly once
    until: str = ""  # a script's text is cut before this line (found exactly once): its first sections only


@dataclass(frozen=True)
class Snapshot:
    repo: str  # owner/name
    commit: str
    files: dict[str, Source] = field(default_factory=dict)  # file name in the program's folder -> its source

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/blob/{self.commit}/"

    def git_dir(self) -> Path:
        return ROOT / self.repo.replace("/", "+") / "repo"

    def read(self, path: str) -> str:
        if not self.git_dir().is_dir():
            raise Unavailable(f"no snapshot of {self.repo} at {self.git_dir()}")
        shown = subprocess.run(["git", "--git-dir", str(self.git_dir()), "show", f"{self.commit}:{path}"],
                               capture_output=True, text=True)
        if shown.returncode != 0:
            raise Unavailable(f"{self.repo} has no {path} at {self.commit[:10]}: {shown.stderr.strip()}")
        return shown.stdout

    def write(self, folder: Path) -> None:
        """Write the program's files into folder, each edited."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, source in self.files.items():
            text = self.read(source.path)
            if source.cells:
                text = notebook_code(text, source.cells)
            if source.until:
                text = cut(text, source.until, f"{self.repo}/{source.path}")
            (folder / name).write_text(edited(text, source.edits, f"{self.repo}/{source.path}"))


def notebook_code(text: str, cells: tuple[int, ...]) -> str:
    notebook = json.loads(text)
    parts = []
    for index in cells:
        lines = "".join(notebook["cells"][index]["source"]).splitlines()
        if lines and lines[0].startswith("%%writefile"):
            lines = lines[1:]
        parts.append("\n".join(line for line in lines if not line.startswith(("!", "%"))))  # at column 0 only
    return "\n\n".join(parts) + "\n"


def cut(text: str, line: str, where: str) -> str:
    if text.count(line) != 1:
        raise ValueError(f"{where}: cut at {line!r} matches {text.count(line)} times, not once")
    return text[:text.index(line)]


def edited(text: str, edits, where: str) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            raise ValueError(f"{where}: edit {old!r} matches {text.count(old)} times, not once")
        text = text.replace(old, new)
    return text
