"""A custom training loop under MultiWorkerMirroredStrategy, as TensorFlow's tutorial writes it, with one mistake
inside the tf.function (argv[1]):

    reduction  a Keras loss with its default reduction called inside strategy.run
    raise      the learner's own `raise` while the step is traced
    assert     an op that fails while the step runs (tf.debugging.assert_equal)
    layer      a Keras layer given inputs of the wrong width while the step is traced
    none       no mistake: the tutorial's loss (reduction NONE, tf.nn.compute_average_loss)
"""
import sys

import numpy as np
import tensorflow as tf

mistake = sys.argv[1]
GLOBAL_BATCH = 32
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat()
iterator = iter(strategy.experimental_distribute_dataset(dataset))
reduction = {} if mistake == "reduction" else {"reduction": tf.keras.losses.Reduction.NONE}
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, **reduction)


def compute_loss(labels, logits):
    if mistake == "raise":
        raise ValueError(f"labels of shape {labels.shape} do not match logits of shape {logits.shape}")
    if mistake == "assert":
        tf.debugging.assert_equal(tf.shape(labels)[0], 7, message="the batch is not 7 examples")
    per_example_loss = loss_object(labels, logits)
    if mistake == "reduction":
        return per_example_loss
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        features, labels = inputs
        if mistake == "layer":
            features = features[:, :4]
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            loss = compute_loss(labels, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for step in range(1, 11):
    loss = train_step(iterator)
    print(f"step {step}/10 loss {float(loss):.4f}", flush=True)
print("done", flush=True)
