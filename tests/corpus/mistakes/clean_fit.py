"""No mistake: the same fit done right (the mistakes' reference; kwnb must say nothing)."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
