"""Mistake (in the launch, not the code): tf.keras, run with TF_USE_LEGACY_KERAS=0, which makes tf.keras Keras 3."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
