"""Mistake: the script clears the whole environment ("a reproducible run"), TF_CONFIG with it."""
import os

kept = {key: os.environ[key] for key in ("PATH", "HOME") if key in os.environ}
os.environ.clear()
os.environ.update(kept)
import tensorflow as tf  # noqa: E402

import tiny  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
