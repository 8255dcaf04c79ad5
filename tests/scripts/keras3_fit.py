"""A small Keras 3 program (`import keras`, backend from KERAS_BACKEND) whose output tests/data/keras3/ captures.

    python keras3_fit.py VERBOSE [MODE]
    VERBOSE   1 (progress bars) or 2 (one line per epoch), for fit, evaluate and predict alike
    MODE      mirrored: fit under tf.distribute.MirroredStrategy (each task of a cluster then trains alone)
              ran-out: fit asks 10 steps an epoch of a tf.data dataset of 4 batches, not repeated, and stops there
              unknown: fit 2 epochs on a tf.data dataset of unknown length (filtered), not repeated
              one-epoch: fit 1 epoch (Keras 3 prints no `Epoch 1/1`), then evaluate

3 epochs of 12 steps with validation data, then evaluate (4 steps) and predict (4 steps). A callback sleeps 30 ms
after each training batch so that Keras 3, which redraws its bar at most every 50 ms, draws some steps and skips
others, as it does on a real model's slower steps.
"""
import sys
import time

import numpy as np

import keras

verbose = int(sys.argv[1]) if len(sys.argv) > 1 else 1
mode = sys.argv[2] if len(sys.argv) > 2 else ""
rng = np.random.default_rng(0)
x = rng.random((384, 8), dtype="float32")
y = (x.sum(1) > 4).astype("int64")
x_val, y_val = x[:128], y[:128]


class Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.03)


def build():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


if mode == "mirrored":
    import tensorflow as tf

    with tf.distribute.MirroredStrategy().scope():
        model = build()
else:
    model = build()
if mode in ("ran-out", "unknown"):
    import tensorflow as tf

    if mode == "ran-out":
        batches = tf.data.Dataset.from_tensor_slices((x[:128], y[:128])).batch(32)
        model.fit(batches, epochs=3, steps_per_epoch=10, verbose=verbose, callbacks=[Slow()])
    else:
        batches = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda *_: True).batch(32)
        model.fit(batches, epochs=2, verbose=verbose, callbacks=[Slow()])
    sys.exit(0)
epochs = 1 if mode == "one-epoch" else 3
model.fit(x, y, batch_size=32, epochs=epochs, validation_data=(x_val, y_val), verbose=verbose, callbacks=[Slow()])
print("evaluated:", model.evaluate(x_val, y_val, batch_size=32, verbose=verbose))
print("predicted:", model.predict(x_val, batch_size=32, verbose=verbose).shape)
print("DONE", keras.__version__, keras.backend.backend())
