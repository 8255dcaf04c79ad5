"""Worker for the TensorBoard tests: a custom loop under MultiWorkerMirroredStrategy that prints nothing.

The chief alone writes tf.summary scalars into LOGDIR (argv[1], default `logs` in the working
directory): `loss` every step (steps counted from 1 across epochs) and `epoch_loss`,
`epoch_accuracy` at each epoch's end, flushed then. The other workers write nothing
(`create_noop_writer`), as the multi-worker tutorials advise. kwnb must find the curves in the
event files, since the log holds no metrics.
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

EPOCHS, STEPS, GLOBAL_BATCH = 2, 5, 32
logdir = sys.argv[1] if len(sys.argv) > 1 else "logs"

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
is_chief = task.get("type", "worker") in ("worker", "chief") and task.get("index", 0) == 0
writer = tf.summary.create_file_writer(logdir) if is_chief else tf.summary.create_noop_writer()

rng = np.random.default_rng(1)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH).with_options(options)
iterator = iter(strategy.experimental_distribute_dataset(ds))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(labels, logits)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


step = 0
with writer.as_default():
    for epoch in range(EPOCHS):
        total_loss = 0.0
        for _ in range(STEPS):
            loss = train_step(iterator)
            step += 1
            tf.summary.scalar("loss", loss, step=step)
            total_loss += loss
        tf.summary.scalar("epoch_loss", total_loss / STEPS, step=epoch)
        tf.summary.scalar("epoch_accuracy", train_accuracy.result(), step=epoch)
        writer.flush()  # tf.summary otherwise writes every 10 events or 120 s
        train_accuracy.reset_states()
writer.close()
