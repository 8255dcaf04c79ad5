"""For tests/test_replay_drift.py: the words TensorFlow raises tests/scripts/known_errors.py's three mistakes with,
in one single-task process (one TensorFlow import instead of a 2-worker run each). Prints `NAME<TAB>Type: message`."""
import json
import os
import socket

with socket.socket() as probe:  # a one-task cluster: the strategy's constructor checks the collectives first
    probe.bind(("localhost", 0))
    port = probe.getsockname()[1]
os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{port}"]}, "task": {"type": "worker", "index": 0}})

import tensorflow as tf  # noqa: E402

tf.constant([1.0])  # the first op: collectives can no longer be configured
MISTAKES = {"late_strategy": lambda: tf.distribute.MultiWorkerMirroredStrategy(),
            "estimator": lambda: tf.estimator,
            "session": lambda: tf.compat.v1.placeholder(tf.float32, [None, 4])}
for name, mistake in MISTAKES.items():
    try:
        mistake()
        print(f"{name}\tno error", flush=True)
    except Exception as error:
        print(f"{name}\t{type(error).__name__}: {error}", flush=True)
