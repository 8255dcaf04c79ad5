"""Mistake: the tutorial's fixed TF_CONFIG pasted into the script (ports 12345/23456, index 0 on every task)."""
import json
import os

os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["localhost:12345", "localhost:23456"]},
                                      "task": {"type": "worker", "index": 0}})
import tensorflow as tf  # noqa: E402

import tiny  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
model.fit(tiny.dataset(tf), epochs=2, steps_per_epoch=5, verbose=2)
