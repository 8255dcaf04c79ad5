"""What the learner-mistake programs share: their data and their model, kept tiny (256 examples of 8
features; Dense(8)-Dense(2)) so that each program runs in seconds. Each mistake is in its own file."""
import numpy as np


def arrays(scale=1.0, seed=None):
    x = (np.random.RandomState(seed).rand(256, 8) * scale).astype("float32")
    return x, (x.sum(1) > 4 * scale).astype("int64")


def dataset(tf, scale=1.0, repeat=True, seed=None):
    data = tf.data.Dataset.from_tensor_slices(arrays(scale, seed)).batch(32)
    return data.repeat() if repeat else data


def model(keras, optimizer="adam"):
    built = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    built.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return built
