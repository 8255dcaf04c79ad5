"""Mistake, Keras 3 on JAX: the whole NumPy arrays given to fit under DataParallel(), whose auto-sharding splits
only a tf.data.Dataset across the processes: fit raises in every process."""
import keras

keras.distribution.initialize()

import tiny

keras.distribution.set_distribution(keras.distribution.DataParallel())
x, y = tiny.arrays(seed=0)
model = tiny.model(keras, seed=0)
model.fit(x, y, batch_size=32, epochs=2, verbose=2)
