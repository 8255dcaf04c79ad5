"""Mistake: unscaled inputs (x1000) and a huge learning rate: the loss becomes NaN. Seeded, the same numbers
every run: unseeded, it once got no verdict in a loaded suite (its logs, not kept, cannot say whether the loss
stayed finite)."""
import tensorflow as tf

import tiny

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras, optimizer=tf.keras.optimizers.SGD(1e30), seed=0)
model.fit(tiny.dataset(tf, scale=1000.0, seed=0), epochs=2, steps_per_epoch=5, verbose=2)
