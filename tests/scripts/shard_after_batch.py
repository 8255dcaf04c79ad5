"""A learner's mistake (issue 39): the dataset sharded by hand after batching, then auto-sharded again by
MultiWorkerMirroredStrategy. 1,050 examples in batches of 64 are 17 batches: 9 for worker 0 and 8 for worker 1,
so the tasks plan different numbers of steps and meet in a collective with different tensors. Without the
.shard call (the strategy shards the data itself) the same fit ends well on both tasks.

    python shard_after_batch.py [--no-shard]
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
index = tf_config["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()

x = np.random.rand(1050, 8).astype("float32")
y = np.random.rand(1050, 1).astype("float32")
global_batch = 64
if "--no-shard" in sys.argv:
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
else:
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).shard(num_workers, index)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=3, verbose=2)
