"""After tensorflow/tensorflow#31070 ("Issue using tf.keras ModelCheckpoint when distributing under
MultiWorkerMirroredStrategy"): every worker passes fit a ModelCheckpoint callback with the same file path, as the
asker did (rewritten small, on random data). tf-keras's callback gives the non-chief workers a temporary folder
of their own, so this one is no collision: kwnb must say nothing."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
x = np.random.RandomState(0).rand(640, 16).astype("float32")
y = (x[:, :10].argmax(1)).astype("int64")
checkpoint = tf.keras.callbacks.ModelCheckpoint("checkpoints/weights.{epoch:02d}", save_weights_only=True)
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat(), epochs=2, steps_per_epoch=5,
          callbacks=[checkpoint], verbose=2)
