"""Mistake: only the chief saves the model (a collective the other task never runs)."""
import json
import os

import tensorflow as tf

import tiny

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
if index == 0:
    model.save("saved_model")
