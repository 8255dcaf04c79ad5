"""Worker for tests/test_diagnose.py: a small tf-keras fit that goes wrong on demand.

    python diagnose_fit.py MODE [STEPS]
    clean     both workers train (STEPS per epoch, 2 epochs)
    raise     worker 1 raises ValueError in a callback at batch 3
    late      worker 1 sleeps 30 s before it creates its strategy
    stall     worker 1 sleeps forever in a callback at batch 3 (it prints nothing more)
    keras3    `import keras` (Keras 3; run with TF_USE_LEGACY_KERAS=0)
    own       the script sets its own TF_CONFIG with the ports given in argv[2]
    uneven    worker 1 runs half the steps per epoch, finishes and exits 0 while the chief still trains
    paths     at batch 3 the chief alone calls strategy.reduce (chief-only code): a collective the other never runs
    data      two data mistakes at once: no repeat() (2 epochs of STEPS steps from 4 batches per worker), and
              unscaled inputs with a huge learning rate (the loss becomes NaN in the first epoch)
    loop      a custom training loop: the chief runs 4 x STEPS steps, worker 1 2 x STEPS, then exits 0
    loopdata  the same loop on every task with 4 x STEPS steps each, from data that is not repeated (4 batches a task)
    hog       worker 1 holds 50 MB more per batch (run it in a memory cgroup: the OOM killer ends it)
    unset     the script deletes TF_CONFIG before it creates its strategy (each task then trains alone)
    noscope   the model is built and compiled outside strategy.scope() (each task trains its own copy)
    diverge   a learning rate of 1e3: the loss grows by orders of magnitude and stays finite
"""
import json
import os
import sys
import time

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 and mode != "own" else 10
if mode == "own":
    ports = sys.argv[2].split(",")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                                          "task": {"type": "worker", "index": index}})
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if mode == "unset":
    del os.environ["TF_CONFIG"]
print(f"worker {index}: {mode}", flush=True)
if mode == "late" and index == 1:
    time.sleep(30)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if mode == "keras3":
    import keras
else:
    keras = tf.keras


class Trouble(keras.callbacks.Callback):
    held = []

    def on_train_batch_end(self, batch, logs=None):
        if index == 1 and batch == 3:
            on_batch_end(mode)
        if index == 0 and batch == 3 and mode == "paths":
            print("chief only:", chief_only_summary(), flush=True)
        if index == 1 and mode == "hog":
            self.held.append(np.ones(50 * 2**20, dtype=np.uint8))  # touched: resident at once
            time.sleep(0.2)


def chief_only_summary():
    return strategy.reduce("SUM", strategy.run(lambda: tf.ones([3])), axis=None)


def on_batch_end(what):
    if what == "raise":
        raise ValueError(f"bad batch on worker {index}")
    if what == "stall":
        time.sleep(3600)


strategy = tf.distribute.MultiWorkerMirroredStrategy()
if mode == "data":  # unseeded, one loaded run in some twenty ended its epoch at a loss of 1.9e29, not NaN (if every
    keras.utils.set_random_seed(0)  # hidden unit dies at the first step, the logits are the biases: they need not overflow)
scale = 1000.0 if mode == "data" else 1.0
x = (np.random.rand(256, 8) * scale).astype("float32")
y = (x.sum(1) > 4 * scale).astype("int64")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
if mode not in ("data", "loopdata"):
    dataset = dataset.repeat()
optimizer = keras.optimizers.SGD(1e30) if mode == "data" else keras.optimizers.SGD(1e3) if mode == "diverge" else "adam"


def build():
    model = keras.Sequential([keras.layers.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


if mode == "noscope":
    model = build()
else:
    with strategy.scope():
        model = build()
if mode in ("loop", "loopdata"):  # the tutorial's custom loop, with a step count per task (a learner's per-shard count)
    loop_steps = 4 * steps if index == 0 or mode == "loopdata" else 2 * steps
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(batch):
        def step_fn(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model.compiled_loss(labels, model(features, training=True)))
            model.optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return strategy.reduce("MEAN", strategy.run(step_fn, args=(batch,)), axis=None)

    for step in range(loop_steps):
        loss = train_step(next(iterator))
        print(f"step {step + 1}/{loop_steps} - loss: {float(loss):.4f}", flush=True)
        time.sleep(0.05)
    print("DONE", flush=True)
    sys.exit(0)
if mode == "uneven" and index == 1:
    steps //= 2
verbose = 1 if mode in ("uneven", "diverge", "noscope") else 2  # fit's default in a notebook: a bar that shows the steps per epoch
epochs = 4 if mode == "diverge" else 2  # a spike, then where the loss settles
model.fit(dataset, epochs=epochs, steps_per_epoch=steps, verbose=verbose, callbacks=[Trouble()])
print("DONE", flush=True)
