"""Worker for the TensorBoard tests: a custom loop under MultiWorkerMirroredStrategy that prints nothing.

The chief alone writes tf.summary scalars into LOGDIR (argv[1], default `logs` in the working
directory): `loss` every step (steps counted from 1 across epochs) and `epoch_loss`,
`epoch_accuracy` at each epoch's end, flushed then. The other workers write nothing
(`create_noop_writer`), as the multi-worker tutorials advise. kwnb must find the curves in the
event files, since the log holds no metrics. The step itself is loop_step.py's.
"""
import json
import os
import sys

import tensorflow as tf
from loop_step import training

EPOCHS, STEPS, GLOBAL_BATCH = 2, 5, 32
logdir = sys.argv[1] if len(sys.argv) > 1 else "logs"

strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
is_chief = task.get("type", "worker") in ("worker", "chief") and task.get("index", 0) == 0
writer = tf.summary.create_file_writer(logdir) if is_chief else tf.summary.create_noop_writer()

train_step, train_accuracy = training(strategy, GLOBAL_BATCH)

step = 0
with writer.as_default():
    for epoch in range(EPOCHS):
        total_loss = 0.0
        for _ in range(STEPS):
            loss = train_step()
            step += 1
            tf.summary.scalar("loss", loss, step=step)
            total_loss += loss
        tf.summary.scalar("epoch_loss", total_loss / STEPS, step=epoch)
        tf.summary.scalar("epoch_accuracy", train_accuracy.result(), step=epoch)
        writer.flush()  # tf.summary otherwise writes every 10 events or 120 s
        train_accuracy.reset_states()
writer.close()
