"""Mistake: steps_per_epoch without .repeat(): the data (8 batches, 4 a task) runs out in the first epoch."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf, repeat=False), epochs=2, steps_per_epoch=5, verbose=2)
