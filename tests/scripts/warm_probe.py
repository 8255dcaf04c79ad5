"""Worker for tests/test_warm.py: what a task sees of its start, as one JSON line, then a small
deterministic 2-worker fit whose per-epoch losses must not depend on a warm or a cold start."""
import json
import os
import sys

seen = {"argv": sys.argv, "file": __file__, "path0": sys.path[0], "cwd": os.getcwd(),
        "tf_config": json.loads(os.environ["TF_CONFIG"]), "stdin_tty_or_null": os.path.realpath("/proc/self/fd/0"),
        "name": __name__, "legacy": os.environ.get("TF_USE_LEGACY_KERAS"), "parent_env": "KWNB_PARENT_PID" in os.environ,
        "tf_already": "tensorflow" in sys.modules,
        "nice": os.getpriority(os.PRIO_PROCESS, 0)}  # the task's own thread: a warm one imported at nice 19
print("SEEN " + json.dumps(seen), flush=True)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.keras import layers  # noqa: E402  (the package TensorFlow chose at import: tf-keras, legacy)

import kwnb  # noqa: E402

print("KERAS " + layers.Dense.__module__, flush=True)

tf.keras.utils.set_random_seed(7)
tf.config.experimental.enable_op_determinism()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(7)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile(tf.keras.optimizers.SGD(0.1), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(dataset, epochs=3, verbose=2)
for epoch, loss in enumerate(history.history["loss"]):
    kwnb.report(epoch=epoch, loss=float(loss))
print("DONE", type(model).__module__, flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
