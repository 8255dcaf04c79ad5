"""Mistake: unscaled inputs (x1000) and a huge learning rate: the loss becomes NaN."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras, optimizer=tf.keras.optimizers.SGD(1e30))
model.fit(tiny.dataset(tf, scale=1000.0), epochs=2, steps_per_epoch=5, verbose=2)
