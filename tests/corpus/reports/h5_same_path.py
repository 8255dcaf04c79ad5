"""After ray-project/ray#27938 (MergeV2Checkpoints' NotFoundError when every worker saves to one folder; its answer:
"It doesn't matter whether it is h5 or tf"): a Keras model trained under MultiWorkerMirroredStrategy, then saved
by every worker to the same HDF5 file (rewritten small, on random data, without Ray)."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
x = np.random.RandomState(0).rand(640, 16).astype("float32")
model.fit(tf.data.Dataset.from_tensor_slices((x, x.sum(1))).batch(64).repeat(), epochs=2, steps_per_epoch=5,
          verbose=2)
model.save("model.h5")  # every worker, the same file
