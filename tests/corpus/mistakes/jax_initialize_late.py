"""Mistake, Keras 3 on JAX: a first look at the devices (a JAX call) before keras.distribution.initialize(),
which must come before any: it raises at once in every process."""
import keras
import jax

print("devices:", jax.devices())
keras.distribution.initialize()

import tiny

keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
processes, process_id = jax.process_count(), jax.process_index()
x, y = (tiny.part(a, process_id, processes) for a in tiny.arrays(seed=0))
model = tiny.model(keras, seed=0)
model.fit(x, y, batch_size=32 // processes, epochs=2, shuffle=False, verbose=2)
