"""Worker for tests/test_diagnose.py: a small tf-keras fit that goes wrong on demand.

    python diagnose_fit.py MODE [STEPS]
    clean     both workers train (STEPS per epoch, 2 epochs)
    raise     worker 1 raises ValueError in a callback at batch 3
    late      worker 1 sleeps 30 s before it creates its strategy
    stall     worker 1 sleeps forever in a callback at batch 3 (it prints nothing more)
    keras3    `import keras` (Keras 3; run with TF_USE_LEGACY_KERAS=0)
    own       the script sets its own TF_CONFIG with the ports given in argv[2]
"""
import json
import os
import sys
import time

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 and mode != "own" else 10
if mode == "own":
    ports = sys.argv[2].split(",")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print(f"worker {index}: {mode}", flush=True)
if mode == "late" and index == 1:
    time.sleep(30)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if mode == "keras3":
    import keras
else:
    keras = tf.keras


class Trouble(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if index == 1 and batch == 3:
            on_batch_end(mode)


def on_batch_end(what):
    if what == "raise":
        raise ValueError(f"bad batch on worker {index}")
    if what == "stall":
        time.sleep(3600)


strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(dataset, epochs=2, steps_per_epoch=steps, verbose=2, callbacks=[Trouble()])
print("DONE", flush=True)
