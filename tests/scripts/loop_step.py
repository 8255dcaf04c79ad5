"""The training step of the custom-loop workers (custom_loop.py prints its metrics, summary_loop.py writes
them as tf.summary scalars): a tiny classifier under MultiWorkerMirroredStrategy, as in TensorFlow's
multi-worker custom training loop tutorial. Imported from the script's folder (sys.path[0]).
"""
import numpy as np
import tensorflow as tf


def training(strategy, global_batch: int):
    """(step, train_accuracy): step() runs one distributed training step and returns its summed loss."""
    rng = np.random.default_rng(1)
    x = rng.random((256, 8), dtype=np.float32)
    y = (x.sum(1) > 4).astype("int64")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch).with_options(options)
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
                loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            train_accuracy.update_state(labels, logits)
            return loss

        per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    return (lambda: train_step(iterator)), train_accuracy
