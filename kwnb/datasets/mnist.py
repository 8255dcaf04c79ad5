"""``load_data()`` for MNIST that still works when the download is impossible.

Build machines, CI and some Binder setups cannot reach storage.googleapis.com, so
``tf.keras.datasets.mnist.load_data()`` fails there and notebooks stop at their first
cell. This module tries Keras first and otherwise returns the real-digit sample shipped
in ``data/mnist_sample.npz`` (see ``data/README.md``), with the same return structure.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np

SAMPLE = Path(__file__).resolve().parent / "data" / "mnist_sample.npz"
NOTICE = ("kwnb: MNIST download unavailable ({why}); using the 10,000-digit offline sample "
          "shipped with kwnb (8,000 train / 2,000 test).")
DOWNLOAD_TIMEOUT = 20  # seconds per socket operation: a firewall that drops packets must not hang a cell


def load_data(path: str = "mnist.npz"):
    """Return ``(x_train, y_train), (x_test, y_test)`` like ``tf.keras.datasets.mnist.load_data``.

    x arrays are uint8 of shape (N, 28, 28), y arrays uint8 of shape (N,). Keras's loader
    (its cache in ~/.keras/datasets, else a download) is tried first; if it fails for any
    reason, or ``KWNB_OFFLINE=1`` is set, the shipped sample is returned instead and one
    line says so, so nobody mistakes 8,000 training digits for 60,000. A note, not an error: on
    stdout (a task's log, a cell's plain output), never stderr, which a notebook shows in red.
    """
    if os.environ.get("KWNB_OFFLINE") == "1":
        why = "KWNB_OFFLINE=1"
    else:
        try:
            return _keras_load_data(path)
        except Exception as e:  # no network, no TensorFlow, corrupt cache: all end here
            why = " ".join(str(e).split())[:160] or type(e).__name__
    print(NOTICE.format(why=why), flush=True)
    return load_sample()


def load_sample():
    """The shipped sample alone, in the ``load_data()`` structure; needs only numpy."""
    with np.load(SAMPLE) as f:
        return (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])


def _keras_load_data(path):
    """Keras's own loader: tf_keras if installed (what kwnb trains with), else tf.keras.

    Keras's get_file uses urllib without a timeout; a default socket timeout is set just
    for this call (unless the caller set one) so an unreachable host fails instead of hanging.
    """
    try:
        import tf_keras as keras
    except ImportError:
        from tensorflow import keras
    previous = socket.getdefaulttimeout()
    if previous is None:
        socket.setdefaulttimeout(DOWNLOAD_TIMEOUT)
    try:
        return keras.datasets.mnist.load_data(path=path)
    finally:
        socket.setdefaulttimeout(previous)
