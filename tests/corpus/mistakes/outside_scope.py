"""Mistake: the model is built and compiled outside strategy.scope(): each task trains its own copy."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=1)
