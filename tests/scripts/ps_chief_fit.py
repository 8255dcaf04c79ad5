"""Kubeflow's dist_mnist pattern, tiny: a chief task coordinates ParameterServerStrategy and trains with
tf-keras fit; the worker and ps tasks only serve (they never log a join), and are stopped when the chief ends."""
import json
import os

import numpy as np
import tensorflow as tf

task = json.loads(os.environ["TF_CONFIG"])["task"]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if task["type"] in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"], task_index=task["index"],
                                  protocol="grpc", start=True)
    print(task["type"], task["index"], "serving", flush=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(resolver)
x = np.random.RandomState(0).rand(256, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(32)
model.fit(dataset, epochs=2, steps_per_epoch=4, verbose=2)
print("chief done", flush=True)
