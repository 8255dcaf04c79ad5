"""kwnb's own log: what went wrong inside kwnb (a supervisor that crashed, a view that failed, a
file TensorBoard could not read), written to `kwnb.log` in the run folder it concerns.

Everything goes through the standard `logging.getLogger("kwnb")`, which does not propagate: a
notebook whose root logger prints would otherwise show kwnb's internals in the user's cell. To see
them there anyway: `logging.getLogger("kwnb").addHandler(logging.StreamHandler())`, or set
`propagate = True` on it. A run's records carry its folder (`for_run`) and go to that folder only.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

LOG_NAME = "kwnb.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

logger = logging.getLogger("kwnb")


class RunFolderHandler(logging.Handler):
    """Appends each record that names a run folder to that folder's kwnb.log.

    The file is opened for each record and closed again: records are rare (errors, restarts), and
    a run that ended keeps no descriptor open however long the kernel lives.
    """

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        folder = getattr(record, "run_dir", None)
        if folder is None:
            return
        try:
            line = self.format(record) + "\n"
            descriptor = os.open(Path(folder) / LOG_NAME, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
            with os.fdopen(descriptor, "a", encoding="utf-8") as log:  # private, like the task logs
                log.write(line)
        except Exception:  # logging's own convention: a broken handler reports on stderr, never raises
            self.handleError(record)


def _configure() -> None:
    if not any(isinstance(handler, RunFolderHandler) for handler in logger.handlers):
        logger.addHandler(RunFolderHandler())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        logger.propagate = False


_configure()


def for_run(run_dir: Path, name: str = "kwnb.engine") -> logging.LoggerAdapter:
    """A logger whose records go to `run_dir`/kwnb.log (and to any handler the user added to "kwnb")."""
    return logging.LoggerAdapter(logging.getLogger(name), {"run_dir": str(run_dir)})
