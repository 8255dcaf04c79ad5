"""Every worker saves, as it must under MultiWorkerMirroredStrategy, but every worker to the same path (argv[1]
says how): the mistake TensorFlow's multi-worker tutorial warns of. Which task fails, if any, is a race.

    savedmodel   model.save("saved_model")  (a SavedModel folder)
    checkpoint   a tf.train.CheckpointManager of directory "ckpt", saved 3 times
    weights      model.save_weights("weights/ckpt")
    right        the tutorial's way: the chief to saved_model, each other worker to a temporary folder it deletes
"""
import os
import sys

import numpy as np
import tensorflow as tf

how = sys.argv[1]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(dataset, epochs=2, steps_per_epoch=5, verbose=2)

if how == "savedmodel":
    model.save("saved_model")
elif how == "checkpoint":
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), directory="ckpt", max_to_keep=2)
    for _ in range(3):
        print("saved", manager.save(), flush=True)
elif how == "weights":
    model.save_weights("weights/ckpt")
elif how == "right":
    task_id = strategy.cluster_resolver.task_id
    folder = "." if task_id == 0 else f"workertemp_{task_id}"
    model.save(os.path.join(folder, "saved_model"))
    if task_id != 0:
        tf.io.gfile.rmtree(folder)
print("done", flush=True)
