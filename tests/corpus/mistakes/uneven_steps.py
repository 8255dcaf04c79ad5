"""Mistake: a custom loop whose step count comes from each task's own shard: worker 1 runs fewer steps."""
import json
import os

import tensorflow as tf

import tiny

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tiny.model(tf.keras)
iterator = iter(strategy.experimental_distribute_dataset(tiny.dataset(tf)))


@tf.function
def train_step(features, labels):
    def step_fn(x, y):
        def loss():
            return tf.reduce_mean(model.compiled_loss(y, model(x, training=True)))
        model.optimizer.minimize(loss, model.trainable_variables)
        return loss()
    return strategy.reduce("MEAN", strategy.run(step_fn, args=(features, labels)), axis=None)


steps = 30 if index == 0 else 12
for step in range(steps):
    loss = train_step(*next(iterator))
    print(f"step {step + 1}/{steps} - loss: {float(loss):.4f}", flush=True)
