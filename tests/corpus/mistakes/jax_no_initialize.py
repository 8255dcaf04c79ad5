"""Mistake, Keras 3 on JAX: keras.distribution.initialize() never called. The KERAS_DISTRIBUTION_* variables are
set but never read: each process sees its one CPU, takes part 0 of every batch and fits a model of its own, and
exits 0."""
import keras
import jax

import tiny

keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
processes, process_id = jax.process_count(), jax.process_index()
x, y = (tiny.part(a, process_id, processes) for a in tiny.arrays(seed=0))
model = tiny.model(keras, seed=0)
model.fit(x, y, batch_size=32 // processes, epochs=2, shuffle=False, verbose=2)
