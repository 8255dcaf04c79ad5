"""Mistake: a TensorFlow op (here the dataset) before the strategy is created."""
import tensorflow as tf

import tiny

data = tiny.dataset(tf)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(data, epochs=2, steps_per_epoch=5, verbose=2)
