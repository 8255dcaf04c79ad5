"""One script for every role, as the tutorials write it: the chief, the workers and a sidecar evaluator
branch on TF_CONFIG's task type. argv: the checkpoint folder, then how many checkpoints the evaluator
reads before it ends by itself (0: never, so kwnb stops it after its grace period)."""
import json
import os
import sys

import numpy as np
import tensorflow as tf

checkpoints, max_evaluations = sys.argv[1], int(sys.argv[2])
task = json.loads(os.environ["TF_CONFIG"])["task"]
x = np.random.RandomState(0).rand(512, 8).astype("float32")
y = (x.sum(1) > 4).astype("int64")


def build():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(2)])
    model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


if task["type"] == "evaluator":  # not part of the cluster: no strategy, it only reads checkpoints
    print("evaluator: cluster has", sorted(json.loads(os.environ["TF_CONFIG"])["cluster"]), flush=True)
    tf.keras.utils.SidecarEvaluator(build(), tf.data.Dataset.from_tensor_slices((x, y)).batch(128), checkpoints,
                                    max_evaluations=max_evaluations or None).start()
    sys.exit(0)


def _is_chief(task_type, task_id, cluster_spec):
    # The multi-worker tutorial's own test: the chief task if there is one, else worker 0.
    return (task_type is None or task_type == "chief"
            or (task_type == "worker" and task_id == 0 and "chief" not in cluster_spec.as_dict()))


strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
print(f"{resolver.task_type}:{resolver.task_id} is_chief={_is_chief(resolver.task_type, resolver.task_id, resolver.cluster_spec())}",
      flush=True)
with strategy.scope():
    model = build()
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
# Every task passes the same path: tf-keras writes the chief's there and the others' to temporary folders.
save = tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoints, "ckpt-{epoch}"), save_weights_only=True)
model.fit(dataset, epochs=3, steps_per_epoch=10, verbose=2, callbacks=[save])
