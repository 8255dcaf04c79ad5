"""Mistake: the script deletes TF_CONFIG (as the tutorial's notebook does before its own set-up): each task trains alone."""
import os

del os.environ["TF_CONFIG"]
import tensorflow as tf  # noqa: E402

import tiny  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
