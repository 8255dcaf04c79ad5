"""The doctor's probe (kwnb/doctor.py runs it by path with the tasks' Python and a task's environment): which
versions of TensorFlow, tf-keras, TensorBoard and Keras are installed, whether TensorFlow and tf-keras import
as a task would import them, how long that took and the memory it took, printed as one JSON line after
MARK. Standard library only: the tasks' Python may not have kwnb's dependencies, or kwnb.
"""
import json
import os
import resource
import sys
import time
from importlib import metadata

MARK = "KWNB-DOCTOR "  # the line that carries the answer: TensorFlow may print its own lines before it
DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-keras", "tensorboard", "keras")
IMPORTS = ("tensorflow", "tf_keras")
ERROR_CHARS = 300  # of each import error: its first lines say what is wrong


def probe() -> dict:
    found = {"python": sys.version.split()[0], "executable": sys.executable, "versions": {}, "errors": {}}
    for dist in DISTRIBUTIONS:
        try:
            found["versions"][dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    start = time.monotonic()
    for module in IMPORTS:
        try:
            __import__(module)
        except BaseException as error:
            found["errors"][module] = f"{type(error).__name__}: {error}".strip()[:ERROR_CHARS]
    found["import_seconds"] = time.monotonic() - start
    found["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux counts it in KiB
    return found


if __name__ == "__main__":
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # run by path: kwnb/task/'s modules are not the ones TensorFlow imports
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from kwnb.task import lean_imports

    lean_imports.install()  # as a task imports TensorFlow: without the optional jax
    print(MARK + json.dumps(probe()))
