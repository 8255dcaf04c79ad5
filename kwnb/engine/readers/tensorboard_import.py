"""Importing TensorBoard's event reader: quietly, cheaply where it can be, and away from the run's supervisor.

The first read of an event file imports TensorFlow where this process has not yet (TensorBoard's lazy `tf`): in a
kernel 2.5 s of CPU, 3.6 s of wall time on the quiet 2-core machine and many more on a busy one. The supervisor
polls the reader between its looks at the tasks, so that import, done in its thread, froze the run for as long:
no log line, no status, no memory sample. A 2-worker run that trained for 8.5 s while it lasted ended with no
memory peak for either task. So the import runs in a thread of its own (`reader_ready`), and the supervisor goes
on looking at the tasks until it is done.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import types

LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"


@contextlib.contextmanager
def quiet_tensorflow_import():
    """TensorFlow imported by kwnb in a kernel (TensorBoard's reader) writes its C++ start-up lines (absl's
    warning, CUDA drivers, CPU instructions) to file descriptor 2, which ipykernel forwards into whatever cell
    runs then, as red stderr; TF_CPP_MIN_LOG_LEVEL does not reach absl's. So descriptor 2 points at /dev/null
    for that import only (2.5 s, once per kernel; Python's sys.stderr is not it in a kernel). The tasks'
    environment is untouched: they must log TensorFlow's joining lines. Nothing where TensorFlow is imported."""
    if "tensorflow" in sys.modules:
        yield
        return
    sys.stderr.flush()
    saved, level = os.dup(2), os.environ.get(LOG_LEVEL)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if level is None:  # jax, which TensorFlow 2.21 imports where installed, sets it (setdefault) for the kernel's
            os.environ.pop(LOG_LEVEL, None)  # every later child: its TensorFlow would then write no INFO lines


def use_tensorflow_stub() -> bool:
    """Read event files with TensorBoard's own TensorFlow stub, in a process that runs no TensorFlow of its own.

    For the terminal's `kwnb run`: its first read then costs 0.2 s of CPU and 33 MB instead of the
    2.5 s and 600 MB of importing TensorFlow (measured here). Never in a kernel: the stub would stand
    in for TensorFlow in the user's tf.summary too ("cannot import tensorflow 2.0 API"). This is
    TensorBoard's switch (tensorboard/compat: a `tensorboard.compat.notf` module forces the stub).
    False, and nothing done, where TensorFlow is already imported."""
    if "tensorflow" in sys.modules:
        return False
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    return True


class _ReaderImport:
    """The one import of TensorBoard's reader in this process, in its own thread: every run of a kernel shares it."""

    def __init__(self):
        self._lock = threading.Lock()  # guards _thread: two runs' supervisors may ask at once
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self.error: BaseException | None = None  # why it could not be imported, once done

    def ready(self, wait: bool) -> bool:
        """Whether the reader can be used now; started on the first ask; `wait`: until the import is done."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._import, name="kwnb-tensorboard-import", daemon=True)
                self._thread.start()
        if wait:
            self._done.wait()
        return self._done.is_set()

    def _import(self) -> None:
        try:
            with quiet_tensorflow_import():
                from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
                from tensorboard.compat import tf
                from tensorboard.util import tensor_util  # noqa: F401

                dir(tf)  # a lazy module: this is the import of TensorFlow (or of its stub)
        except Exception as error:  # noqa: BLE001 - reported by the reader as why there are no curves
            self.error = error
        finally:
            self._done.set()


_READER = _ReaderImport()


def reader_ready(wait: bool = True) -> bool:
    """Whether TensorBoard's reader is imported; False while it is being imported (only when not `wait`).
    Raises ImportError where it could not be imported (TensorBoard missing, a TensorFlow that fails to import)."""
    global _READER
    if not _READER.ready(wait):
        return False
    error = _READER.error
    if error is not None:
        _READER = _ReaderImport()  # the next run imports again: TensorBoard may have been installed since
        raise error if isinstance(error, ImportError) else ImportError(f"{type(error).__name__}: {error}")
    return True
