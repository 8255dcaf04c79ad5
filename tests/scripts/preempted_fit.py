"""model.fit with BackupAndRestore; worker 1 dies (SIGKILL) after epoch 2 of the first attempt only."""
import os
import signal
import sys

import numpy as np
import tensorflow as tf

backup_dir, marker = sys.argv[1], sys.argv[2]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task_index = strategy.cluster_resolver.task_id
rng = np.random.default_rng(0)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])


class Preemption(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 1 and task_index == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


model.fit(dataset, epochs=4, steps_per_epoch=5, verbose=2,
          callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir), Preemption()])
print("training complete")
