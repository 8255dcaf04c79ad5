"""What the learner-mistake programs share: their data and their model, kept tiny (256 examples of 8
features; Dense(8)-Dense(2)) so that each program runs in seconds. Each mistake is in its own file. The ones for
Keras 3 on JAX (jax_*.py) feed NumPy arrays, each process its part of every global batch (`part`), and import no
TensorFlow: a process that does takes about 900 MiB, one that does not about 300 MiB."""
import numpy as np


def arrays(scale=1.0, seed=None):
    x = (np.random.RandomState(seed).rand(256, 8) * scale).astype("float32")
    return x, (x.sum(1) > 4 * scale).astype("int64")


def dataset(tf, scale=1.0, repeat=True, seed=None):
    data = tf.data.Dataset.from_tensor_slices(arrays(scale, seed)).batch(32)
    return data.repeat() if repeat else data


def part(a, process_id, processes, global_batch=32):
    """This process's rows of every global batch: of each batch, the process_id-th block of global_batch //
    processes rows, so that the processes' parts side by side make the batch."""
    per_process = global_batch // processes
    return a.reshape(-1, processes, per_process, *a.shape[1:])[:, process_id].reshape(-1, *a.shape[1:])


def model(keras, optimizer="adam", seed=None):
    """seed: the same first weights in every process (JAX replicates each process's own; keras.utils'
    set_random_seed would import TensorFlow to seed it too)."""
    first = {} if seed is None else {"kernel_initializer": keras.initializers.GlorotUniform(seed)}
    last = {} if seed is None else {"kernel_initializer": keras.initializers.GlorotUniform(seed + 1)}
    built = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(8, activation="relu", **first),
                              keras.layers.Dense(2, **last)])
    built.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return built
