"""Errors whose message says what went wrong but not what to do: one sentence with the fix, for the
`error` diagnosis (diagnose.py). Each pattern is matched against the task's traceback (its type and message);
the first that matches explains it. The messages are TensorFlow 2.21's (tests/test_diagnose.py runs each).
"""
from __future__ import annotations

import re

KNOWN: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"Collective ops must be configured at program startup"),
     "The strategy was created after the script's first TensorFlow operation (a tensor, a dataset or a model): "
     "create MultiWorkerMirroredStrategy first, right after importing TensorFlow, as TensorFlow configures "
     "collectives once, at program startup"),
    (re.compile(r"module 'tensorflow(\.compat\.v1)?' has no attribute 'estimator'"),  # tf or tf.compat.v1
     "TensorFlow 2.16 removed tf.estimator: train a Keras model with model.fit (or a custom loop) under "
     "the strategy instead"),
    (re.compile(r"tf\.placeholder\(\) is not compatible with eager execution|"
                r"module 'tensorflow' has no attribute '(Session|placeholder|ConfigProto)'|"
                r"tf\.compat\.v1\.Session|The Session graph is empty"),
     "This is TensorFlow 1 graph code (placeholders, sessions), which MultiWorkerMirroredStrategy does not run in "
     "TensorFlow 2: write the model in Keras (model.fit) or as a tf.function under strategy.scope()"),
    # Kubeflow's older TFJob examples: tf.app.flags, tf.logging, tf.contrib, tf.train's optimizers, the MNIST reader
    (re.compile(r"module 'tensorflow(\._api\.v2\.train)?' has no attribute "
                r"'(app|flags|logging|contrib|\w+Optimizer|Supervisor|replica_device_setter)'|"
                r"No module named 'tensorflow\.(examples|contrib)"),
     "This is TensorFlow 1 code (tf.app, tf.logging, tf.contrib, tf.train's optimizers, tensorflow.examples), which "
     "TensorFlow 2 removed: use its TensorFlow 2 version (tf.keras optimizers and datasets, absl flags, "
     "model.fit under the strategy)"),
    # Keras 3 on JAX (--framework jax), jax 0.10 and keras 3.15's words
    (re.compile(r"jax\.distributed\.initialize\(\) must be called before any JAX"),
     "Call keras.distribution.initialize() first, right after `import keras`: JAX joins the other processes "
     "only before its first computation (a model, a tensor, jax.devices())"),
    (re.compile(r"multi-worker distribution with auto-sharding enabled, the data must be provided as a `tf\.data"),
     "Give fit a tf.data.Dataset, which DataParallel shards across the processes, or give each process its own "
     "shard of the arrays and make the distribution with DataParallel(auto_shard_dataset=False)"),
)


def explain(short_type: str, message: str) -> str:
    """The fix for an error kwnb knows, in one sentence (capitalised: it follows TensorFlow's), or ""."""
    text = f"{short_type}: {message}"
    return next((fix for pattern, fix in KNOWN if pattern.search(text)), "")
