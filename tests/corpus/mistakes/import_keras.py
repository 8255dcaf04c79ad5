"""Mistake: `import keras` (Keras 3), which MultiWorkerMirroredStrategy cannot train."""
import keras
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
