"""No mistake, Keras 3 on JAX: initialize() first, DataParallel, each process its part of every global batch of
NumPy arrays (the JAX mistakes' reference; kwnb must say nothing)."""
import keras

keras.distribution.initialize()

import jax

import tiny

keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
processes, process_id = jax.process_count(), jax.process_index()
x, y = (tiny.part(a, process_id, processes) for a in tiny.arrays(seed=0))
model = tiny.model(keras, seed=0)
model.fit(x, y, batch_size=32 // processes, epochs=2, shuffle=False, verbose=2)
