"""Keeps `import tensorflow` from importing jax in a task that did not ask for it.

TensorFlow 2.21's `tensorflow.lite.python.util` runs `from jax import jit` (in a try) wherever jax is installed,
for TFLite's converter of JAX functions. A tf-keras task's `import tensorflow` then loads jax and jaxlib as well:
about 109 MiB more peak RSS per process (667 against 558 MiB for `import tensorflow` with tf-keras, jax 0.10.2),
paid by every TensorFlow task, and by every warm interpreter, of a machine that has `kwnb[jax]` (Binder's image
does, for notebook 07). The finder below answers "no jax" to that importer only, as on a machine without jax; any
other import of jax, the script's or Keras 3's (its Orbax callback module imports it on every backend), loads it
as usual, and a script that imports jax before tensorflow keeps TFLite's JAX converter. (Keras 3's import is left
alone: with it refused too, a Keras 3 fit on the TensorFlow backend segfaulted once in its evaluation under load,
and Keras 3 cannot train across workers there anyway.)
"""
import sys

OPTIONAL_IMPORTERS = ("tensorflow.lite.python.util",)


class _NoJaxForTfLite:
    """A meta path finder that refuses `jax` when one of OPTIONAL_IMPORTERS is the module importing it (in a
    Keras-on-JAX task Keras' backend has imported jax before: the finder is not asked)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "jax":
            return None
        frame = sys._getframe(1)
        while frame is not None:  # importlib's own frames first, then the importing module's
            if frame.f_globals.get("__name__") in OPTIONAL_IMPORTERS:
                raise ModuleNotFoundError("jax left out of an optional import in a kwnb task "
                                          "(kwnb/task/lean_imports.py)", name="jax")
            frame = frame.f_back
        return None


def install() -> None:
    """Put the finder first on sys.meta_path, once; before anything imports tensorflow."""
    if not any(isinstance(finder, _NoJaxForTfLite) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NoJaxForTfLite())
