"""The Keras 3 benchmark's job: a small model trained by 2 (or N) processes with Keras 3's distribution API
on JAX, as notebook 07 trains: NumPy data each process shards itself, `DataParallel(auto_shard_dataset=False)`,
and no TensorFlow in the process (Keras would import it, when installed, only to seed it).

Markers as in train.py, with the process's own clock:
  BENCH start T      the script began
  BENCH imported T   `import keras` and `keras.distribution.initialize()` returned (the processes have joined)
  BENCH step K T     training step K finished (1 and the last)
  BENCH done T       model.fit returned
argv: [--steps S]
"""
import time

print(f"BENCH start {time.time():.6f}", flush=True)

import argparse  # noqa: E402
import sys  # noqa: E402

sys.modules["tensorflow"] = None  # as notebook 07: about 450 MiB less per process
import keras  # noqa: E402
import numpy as np  # noqa: E402

keras.distribution.initialize()  # the KERAS_DISTRIBUTION_* variables: set by kwnb, or by hand
import jax  # noqa: E402

print(f"BENCH imported {time.time():.6f}", flush=True)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
options = parser.parse_args()
PER_PROCESS_BATCH = 64

rng = np.random.default_rng(jax.process_index())  # each process its own part of the data
x = rng.random((options.steps * PER_PROCESS_BATCH, 16), dtype=np.float32)
y = (x.sum(1) > 8).astype("int32")

keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Markers(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 in (1, options.steps):
            print(f"BENCH step {batch + 1} {time.time():.6f}", flush=True)


model.fit(x, y, batch_size=PER_PROCESS_BATCH, epochs=1, shuffle=False, verbose=2, callbacks=[Markers()])
print(f"BENCH done {time.time():.6f}", flush=True)
