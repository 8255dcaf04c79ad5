"""kwnb.datasets.mnist: the offline fallback must return real, well-formed MNIST digits."""
from __future__ import annotations

import gzip
import importlib.util
import socket
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from kwnb.datasets import build_mnist_sample, mnist

SRC = Path(__file__).resolve().parents[2] / "shared/data/mnist"
needs_src = pytest.mark.skipif(not SRC.is_dir(), reason=f"MNIST source files not found at {SRC}")


def check_sample(data, out: str) -> None:
    """The shape of the shipped sample, and exactly one line announcing it (on stdout: a note, not an error)."""
    (x_train, y_train), (x_test, y_test) = data
    assert x_train.shape == (8000, 28, 28) and x_test.shape == (2000, 28, 28)
    assert y_train.shape == (8000,) and y_test.shape == (2000,)
    for a in (x_train, y_train, x_test, y_test):
        assert a.dtype == np.uint8
    assert x_train.max() == 255 and x_train.min() == 0  # raw grey levels, not rescaled
    assert set(np.unique(y_train)) == set(range(10)) == set(np.unique(y_test))
    assert np.bincount(y_test, minlength=10).min() > 150  # stratified, not just present
    lines = out.splitlines()
    assert len(lines) == 1 and "offline sample" in lines[0] and "8,000 train" in lines[0]


def test_offline_env_returns_sample_without_trying_keras(monkeypatch, capfd):
    monkeypatch.setenv("KWNB_OFFLINE", "1")
    monkeypatch.setattr(mnist, "_keras_load_data", lambda path: pytest.fail("Keras was tried"))
    data = mnist.load_data()
    said = capfd.readouterr()
    check_sample(data, said.out)
    assert said.err == ""


def test_failing_keras_loader_falls_back(monkeypatch, capfd):
    """A stand-in tf_keras whose loader raises: it must be called, then the sample returned."""
    monkeypatch.delenv("KWNB_OFFLINE", raising=False)
    calls = []

    def load_data(path):
        calls.append(path)
        raise Exception("URL fetch failure on https://example.invalid/mnist.npz")

    fake = types.SimpleNamespace(datasets=types.SimpleNamespace(mnist=types.SimpleNamespace(load_data=load_data)))
    monkeypatch.setitem(sys.modules, "tf_keras", fake)
    data = mnist.load_data("custom.npz")
    assert calls == ["custom.npz"]
    said = capfd.readouterr()
    check_sample(data, said.out)
    assert "URL fetch failure" in said.out and said.err == ""
    assert socket.getdefaulttimeout() is None  # the download timeout did not leak


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow not installed")
def test_real_keras_download_failure_falls_back(monkeypatch, tmp_path, capfd):
    """Real Keras, empty cache, name resolution failing as on the offline build machines."""
    monkeypatch.delenv("KWNB_OFFLINE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # tf_keras caches in ~/.keras
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / ".keras"))  # Keras 3 honours KERAS_HOME

    def no_dns(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    data = mnist.load_data()
    said = capfd.readouterr()
    notes = [line for line in said.out.splitlines() if line.startswith("kwnb:")]
    check_sample(data, "\n".join(notes))
    assert "Name or service not known" in notes[0]
    assert not [line for line in said.err.splitlines() if line.startswith("kwnb:")]
    assert not list(tmp_path.rglob("mnist.npz"))


@needs_src
def test_sample_pixels_match_idx_source():
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    images = gzip.decompress((SRC / build_mnist_sample.IMAGES).read_bytes())
    labels = gzip.decompress((SRC / build_mnist_sample.LABELS).read_bytes())
    test = build_mnist_sample.split_mask(np.frombuffer(labels, np.uint8, offset=8))
    train_idx, test_idx = np.flatnonzero(~test), np.flatnonzero(test)
    for x, y, idx in ((x_train, y_train, train_idx), (x_test, y_test, test_idx)):
        for k in (0, 1, 777, len(idx) - 1):
            i = int(idx[k])
            assert x[k].tobytes() == images[16 + 784 * i: 16 + 784 * (i + 1)]
            assert y[k] == labels[8 + i]


@needs_src
def test_shipped_npz_equals_rebuild():
    rebuilt = build_mnist_sample.build(SRC)
    with np.load(mnist.SAMPLE) as shipped:
        assert sorted(shipped.files) == sorted(rebuilt)
        for key, a in rebuilt.items():
            np.testing.assert_array_equal(shipped[key], a)


def test_module_imports_with_numpy_only():
    """Importing must not pull in TensorFlow (slow) or IPython (not there in plain scripts)."""
    code = ("import sys, kwnb.datasets.mnist; "
            "bad = [m for m in ('tensorflow', 'tf_keras', 'keras', 'IPython') if m in sys.modules]; "
            "assert not bad, bad")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)
