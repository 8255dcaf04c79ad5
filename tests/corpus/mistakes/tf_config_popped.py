"""Mistake: a module the script imports pops TF_CONFIG: each task trains alone."""
import quiet_setup  # noqa: F401  (pops TF_CONFIG)
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
