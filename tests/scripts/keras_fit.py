import os, sys, json
import numpy as np
import tensorflow as tf
verbose = int(sys.argv[1]) if len(sys.argv) > 1 else 1
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(512, 8).astype("float32"); y = (x.sum(1) > 4).astype("int64")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
with strategy.scope():
    m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    m.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
m.fit(ds, epochs=3, steps_per_epoch=20, verbose=verbose)
print("DONE", type(tf.keras.Model))
