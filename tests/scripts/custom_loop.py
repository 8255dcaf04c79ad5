"""Worker for tests/test_run.py: a custom training loop under MultiWorkerMirroredStrategy.

Prints `Epoch: %d, accuracy: %f, train_loss: %f.` once per epoch, as TensorFlow's
multi-worker custom training loop tutorial does; kwnb must read its curves from these lines.
"""
import numpy as np
import tensorflow as tf

EPOCHS, STEPS, GLOBAL_BATCH = 3, 4, 32

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(1)
x = rng.random((256, 8), dtype=np.float32)
y = (x.sum(1) > 4).astype("int64")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH).with_options(options)
iterator = iter(strategy.experimental_distribute_dataset(ds))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
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


for epoch in range(EPOCHS):
    total_loss = 0.0
    for _ in range(STEPS):
        total_loss += train_step(iterator)
    print("Epoch: %d, accuracy: %f, train_loss: %f." % (epoch, train_accuracy.result(), total_loss / STEPS), flush=True)
    train_accuracy.reset_states()
