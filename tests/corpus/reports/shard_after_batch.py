"""After horovod/horovod#2083 ("Different number of steps on different workers": a dataset sharded by hand among
two workers, one of them getting a batch more): the same under MultiWorkerMirroredStrategy, the dataset batched,
then sharded by hand by the task's index, and auto-sharded again by the strategy (rewritten small)."""
import json
import os

import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ["TF_CONFIG"])["task"]
num_workers, index = strategy.num_replicas_in_sync, task["index"]
x = np.random.RandomState(0).rand(704, 8).astype("float32")  # 11 batches of 64
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).shard(num_workers, index)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(dataset, epochs=2, verbose=2)
