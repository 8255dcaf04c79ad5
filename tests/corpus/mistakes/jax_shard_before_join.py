"""Mistake, Keras 3 on JAX: each process cuts its shard before it joins, from KERAS_DISTRIBUTION_PROCESS_ID, in
blocks of 128 rows, and the data (250 rows) is not a whole number of them: process 1's block is short and its
reshape into batches raises, before initialize(); process 0 waits for it there (300 s by JAX's default)."""
import os

import keras

import tiny

process_id = int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
x, y = (a[:250] for a in tiny.arrays(seed=0))
rows = slice(128 * process_id, 128 * (process_id + 1))
x_mine, y_mine = x[rows].reshape(8, 16, 8), y[rows].reshape(8, 16)  # 8 batches of 16 rows

keras.distribution.initialize()
keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
model = tiny.model(keras, seed=0)
for epoch in range(2):
    for batch in range(8):
        loss = model.train_on_batch(x_mine[batch], y_mine[batch])
    print(f"epoch {epoch + 1} loss {float(loss[0]):.4f}", flush=True)
