"""Worker for tests/test_run.py: reports what it was given, then trains a tiny model with model.fit.

The first line it prints is `KWNB-TEST {json}`: its TF_CONFIG, cwd and the environment variables
kwnb promises to set, so the test can check them from the worker's side. argv[1] is Keras's verbose.
Each batch sleeps a little longer than tf-keras's 0.05 s progress-bar throttle, so every step of
every epoch is drawn (including the last), which makes the step rows checkable against the epoch rows.
"""
import json
import os
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
seen = {
    "task_type": config["task"]["type"],
    "task_index": config["task"]["index"],
    "tf_config": config,
    "cwd": os.getcwd(),
    "argv": sys.argv[1:],
    "env": {k: os.environ.get(k) for k in ("TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "KWNB_TEST_FLAG")},
}
print("KWNB-TEST " + json.dumps(seen), flush=True)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

verbose = int(sys.argv[1]) if len(sys.argv) > 1 else 1
# tf-keras warns (once, on stderr, in the middle of a progress line) that the sleeping callback is slow.
tf.get_logger().setLevel("ERROR")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()


class SlowBatches(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.08)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(ds, epochs=3, steps_per_epoch=5, verbose=verbose, callbacks=[SlowBatches()])
print(f"KWNB-TEST done {config['task']['type']} {config['task']['index']} keras={tf.keras.__name__}", flush=True)
