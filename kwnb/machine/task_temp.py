"""A temporary folder of the user's own for every local task: TMPDIR, TEMP and TMP name it unless the
user set TMPDIR (machine/task_env.py sets them). Otherwise tasks write into the shared /tmp, where
TensorFlow's AutoGraph leaves its generated modules and their /tmp/__pycache__, a folder then owned by
whichever learner ran first, so that the next learner's AutoGraph cannot cache there, and each
learner's files are in everyone's view (issue 30).

One folder per user, not per run: the warm pool keys its interpreters by their environment
(backends/warm.py), so a folder per run would leave every run cold. It is `kwnb-<uid>` in the system's
temporary directory, mode 700; where someone else made that name first (to read what lands there),
a new folder with a random name is used instead.
"""
from __future__ import annotations

import os
import stat
import tempfile

_fallback: str | None = None  # this process's random folder, where the usual name is someone else's


def private_folder(base: str | None = None) -> str:
    """This user's folder (made if missing, mode 700), checked to be a real folder of this user's own."""
    global _fallback
    path = os.path.join(base or tempfile.gettempdir(), f"kwnb-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    if _own_private_folder(path):
        return path
    if _fallback is None or not _own_private_folder(_fallback):
        _fallback = tempfile.mkdtemp(prefix=f"kwnb-{os.geteuid()}-", dir=base)
    return _fallback


def _own_private_folder(path: str) -> bool:
    """A folder, not a link, owned by this user; made mode 700 if it was not."""
    try:
        found = os.lstat(path)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            return False
        if stat.S_IMODE(found.st_mode) != 0o700:
            os.chmod(path, 0o700)
        return True
    except OSError:
        return False
