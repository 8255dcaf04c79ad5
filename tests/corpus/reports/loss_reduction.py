"""After tensorflow/tensorflow#27857 (its comment of 2019-04-30: under CollectiveAllReduceStrategy, now
MultiWorkerMirroredStrategy, TensorFlow asks for a loss reduction): a custom training loop whose Keras loss keeps
its default reduction and is called inside strategy.run, in a tf.function (rewritten small, on random data). It
fails with "ValueError: in user code:" and, lines later, the real message."""
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 64
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.RandomState(0).rand(640, 16).astype("float32")
y = (x.sum(1) > 8).astype("int64")
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH).repeat())
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((16,)), tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # its default reduction


def step(inputs):
    features, labels = inputs
    with tf.GradientTape() as tape:
        loss = loss_object(labels, model(features, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(inputs):
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(inputs,)), axis=None)


iterator = iter(dataset)
for number in range(10):
    print(f"step {number}: loss {float(train_step(next(iterator))):.4f}")
