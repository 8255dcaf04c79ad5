"""The benchmark's training job: a small Keras model under MultiWorkerMirroredStrategy.

Prints marker lines carrying the worker's own clock, so every method is timed the same way
whatever reads its output (a log file, ipyparallel's captured stdout):
  BENCH start T      the script began (before TensorFlow is imported)
  BENCH imported T   `import tensorflow` finished
  BENCH step K T     training step K finished (1, --mark-a and --mark-b)
  BENCH done T       model.fit returned
argv: [--steps S] [--mark-a A] [--mark-b B] [--verbose V]
"""
import time

print(f"BENCH start {time.time():.6f}", flush=True)

import argparse  # noqa: E402
import os  # noqa: E402

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

print(f"BENCH imported {time.time():.6f}", flush=True)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=70)
parser.add_argument("--mark-a", type=int, default=10)
parser.add_argument("--mark-b", type=int, default=60)
parser.add_argument("--verbose", type=int, default=1)
options = parser.parse_args()
marks = {1, options.mark_a, options.mark_b}

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((1024, 16), dtype=np.float32)
y = (x.sum(1) > 8).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(32, activation="relu", input_shape=(16,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Markers(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 in marks:
            print(f"\nBENCH step {batch + 1} {time.time():.6f}", flush=True)


model.fit(dataset, epochs=1, steps_per_epoch=options.steps, verbose=options.verbose, callbacks=[Markers()])
print(f"BENCH done {time.time():.6f}", flush=True)
