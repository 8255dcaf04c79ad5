"""What another user needs to run code from this checkout, for tests that run code as another user.

A newcomer may clone into a directory other users cannot enter (a clone under /root, or under
`mktemp -d`: mode 700). User 65534 then cannot import kwnb from the checkout, whatever the files'
own modes, and neither from a venv inside it. So such a test runs the system's Python on a copy of
the package's .py files (about 0.5 MB), made in the first temporary directory every user can enter
(`copy_for_everyone`); the venv's packages, too many to copy (about 2 GB with TensorFlow), are reached
in a mount namespace of the test's own that opens a way through each closed folder (`reach_steps`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm")  # after tempfile.gettempdir(), which honours $TMPDIR


def enterable_by_everyone(path: Path) -> bool:
    """Every directory from / down to `path` has the x bit for others (the bit a stranger's lookup needs)."""
    path = Path(path).resolve()
    try:
        return all(os.stat(part).st_mode & stat.S_IXOTH for part in (path, *path.parents))
    except OSError:
        return False


def shared_base() -> Path | None:
    """The first temporary directory everyone can enter, or None."""
    for base in dict.fromkeys((tempfile.gettempdir(), *CANDIDATES)):
        if Path(base).is_dir() and enterable_by_everyone(Path(base)):
            return Path(base)
    return None


@contextlib.contextmanager
def copy_for_everyone(package: Path) -> Iterator[Path | None]:
    """A directory holding a world-readable copy of `package`'s .py files (None where no base is
    enterable by everyone); removed on exit."""
    base = shared_base()
    if base is None:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="kwnb-readable-", dir=base))  # mode 700: opened up below
    try:
        target = root / Path(package).name
        shutil.copytree(package, target, ignore=_only_python)
        for directory, _, files in os.walk(root):
            os.chmod(directory, 0o755)
            for name in files:
                os.chmod(os.path.join(directory, name), 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def closed_folders(needed: list[Path]) -> dict[Path, set[str]]:
    """The folders on the way to each needed path that other users cannot enter, each with the entries below it
    that lead on (a clone in a mode-700 folder needs its venv, its package and its tests through one folder)."""
    closed: dict[Path, set[str]] = {}
    for path in needed:
        path = Path(os.path.realpath(path))
        for folder in path.parents:
            if folder != Path("/") and not folder.stat().st_mode & stat.S_IXOTH:
                closed.setdefault(folder, set()).add(path.relative_to(folder).parts[0])
    return dict(sorted(closed.items()))


def reach_steps(needed: list[Path], scratch: Path) -> str:
    """Shell steps, to run as root in a mount namespace of one's own (`unshare --mount --propagation private`),
    after which other users can reach every needed path ("" where they can already).

    Each closed folder gets one tmpfs of mode 711 over it with only the entries that lead on bound back in: the
    machine's own folders keep their modes, and the way ends with the namespace's processes. Outer folders come
    first, so an inner closed folder is found through the entry bound back into the outer one."""
    steps = []
    for number, (closed, entries) in enumerate(closed_folders(needed).items()):
        hidden = Path(scratch) / f"hidden{number}"
        steps.append(f"mkdir -p {hidden} && mount --bind {closed} {hidden} && "
                     f"mount -t tmpfs -o mode=711 kwnb-reach {closed}")
        for entry in sorted(entries):
            make = "mkdir" if (closed / entry).is_dir() else "touch"
            steps.append(f"{make} {closed / entry} && mount --bind {hidden / entry} {closed / entry}")
    return " && ".join(steps)


def _only_python(directory: str, names: list[str]) -> list[str]:
    return [name for name in names if name == "__pycache__"
            or (not name.endswith(".py") and not os.path.isdir(os.path.join(directory, name)))]
