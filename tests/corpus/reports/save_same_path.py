"""After tensorflow/tensorflow#38635 ("How to Save Model with TF2.x Keras Multiworker Distributed Training?"): a
Keras model trained under MultiWorkerMirroredStrategy, then saved by every worker with model.save to one path, as
the asker's program did (rewritten small, on random data)."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((16,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=tf.keras.optimizers.Adam(), loss=tf.keras.losses.BinaryCrossentropy(),
                  metrics=[tf.keras.metrics.AUC()])
x = np.random.RandomState(0).rand(1000, 16).astype("float32")
y = (x.sum(1) > 8).astype("float32")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(100).repeat(), epochs=2, steps_per_epoch=5, verbose=2)
model.save("saved_model")  # every worker, the same path
