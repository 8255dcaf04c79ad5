"""A TensorFlow task does not load jax because TensorFlow Lite and Keras 3 try it (kwnb/task/lean_imports.py): about
109 MiB per process on a machine with jax installed. The script's own `import jax` still works."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from kwnb.backends.base import BOOTSTRAP
from kwnb.task import lean_imports

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (kwnb[jax])")


def _asked_by(importer: str, name: str = "jax"):
    """What the finder answers when module `importer` imports `name` (its frame is the importing module's)."""
    return eval("finder.find_spec(name)", {"__name__": importer, "finder": lean_imports._NoJaxForTfLite(),
                                           "name": name})


def test_installed_once(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    lean_imports.install()
    lean_imports.install()
    assert sum(isinstance(f, lean_imports._NoJaxForTfLite) for f in sys.meta_path) == 1
    assert isinstance(sys.meta_path[0], lean_imports._NoJaxForTfLite)


@pytest.mark.parametrize("importer", lean_imports.OPTIONAL_IMPORTERS)
def test_the_optional_importers_get_no_jax(monkeypatch, importer):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    with pytest.raises(ModuleNotFoundError, match="optional import in a kwnb task"):
        _asked_by(importer)
    assert _asked_by(importer, "jaxlib") is None  # only jax's own name is refused; what jax imports is not asked


def test_any_other_importer_is_left_to_the_other_finders(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert _asked_by("__main__") is None
    assert _asked_by("keras.src.backend.jax") is None
    assert _asked_by("keras.src.callbacks.orbax_checkpoint") is None  # Keras 3's own import is left alone


def test_keras_on_jax_gets_it_everywhere(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert _asked_by("keras.src.callbacks.orbax_checkpoint") is None


@needs_jax
def test_a_tensorflow_task_starts_without_jax(tmp_path):
    """A real task's start (the bootstrap, as the local launcher runs it): tf-keras' `import tensorflow` and a model,
    no jax; then the script's own `import jax` loads it."""
    pytest.importorskip("tensorflow")
    script = tmp_path / "main.py"
    script.write_text("import sys\nimport tensorflow as tf\ntf.keras.Sequential([tf.keras.layers.Dense(2)])\n"
                      "print('after tensorflow:', 'jax' in sys.modules)\n"
                      "import jax\nprint('after import jax:', jax.numpy.add(1, 2))\n")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run([sys.executable, BOOTSTRAP, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "after tensorflow: False" in done.stdout
    assert "after import jax: 3" in done.stdout
