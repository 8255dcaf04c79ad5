"""Every worker saves its checkpoints, as it must under MultiWorkerMirroredStrategy, but every worker into the same
directory, "ckpt": in the captures it never failed, and the directory held one task's files."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
model.fit(dataset, epochs=2, steps_per_epoch=5, verbose=2)
manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), directory="ckpt", max_to_keep=2)
for _ in range(3):
    print("saved", manager.save(), flush=True)
print("done", flush=True)
