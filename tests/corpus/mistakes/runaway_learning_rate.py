"""Mistake: a learning rate of 1e3: the loss grows by orders of magnitude and stays finite."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras, optimizer=tf.keras.optimizers.SGD(1e3))
model.fit(tiny.dataset(tf), epochs=4, steps_per_epoch=10, verbose=1)
